"""Measuring one way of answering for a run against another, through the task's own predictor: the
comparison of answers that ``nlptasks export --onnx`` reports, and the measurement that lets a
configuration answer for the run when every choice is ``auto``
(:mod:`nlptasks.inference.deployments`): an export (``nlptasks export``), or the run's own weights
in another precision (:func:`measure_precisions`, at the end of ``nlptasks run``).

:func:`compare_results` of the answers of the same inputs:

* ``changed``: inputs whose discrete results (labels, tags, entity types and spans: every value
  that is not a float) differ;
* ``max_score_diff``: the largest difference of any float (scores, similarities);
* ``gold``: for each discrete result field that the file's rows also hold (a ``label`` column,
  ner's ``tags``, a multi-label run's ``labels``; not a float such as a pair run's predicted
  ``score`` beside a 0-5 ``score`` column, nor a list beside a csv cell), the accuracy of each side
  against the file and the change in points (lists such as tags, one per token, count element by
  element; lists of another length than the file's, such as a multi-label run's labels, count a
  row as right when they hold the same items).  A field equal to the file's in every row for both
  sides is left out: the input's echo (the text, the tokens), or nothing to report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.engine.system.machine import cpu_name
from nlptasks.inference.deployments import agreement, folder_digest
from nlptasks.inference.streaming import run_rows

__all__ = [
    "batch_dependence",
    "compare_results",
    "measure_deployment",
    "MEASURE_SECONDS",
    "measure_precisions",
    "rates",
    "refuses",
    "sample_rows",
]


def sample_rows(
    manifest: dict[str, Any], limit: int, splits: tuple[str, ...] = ("test", "validation", "train")
) -> tuple[str | None, str | None, list[Any]]:
    """``(split, file, rows)``: up to ``limit`` rows of the run's first split in ``splits`` (test,
    else validation, else train): :func:`nlptasks.inference.streaming.run_rows`."""
    return run_rows(manifest, limit, splits)


def _discrete(value: Any) -> Any:
    """``value`` without its floats (what must be equal between backends)."""
    if isinstance(value, dict):
        return {k: _discrete(v) for k, v in value.items() if not isinstance(v, float)}
    if isinstance(value, list):
        return [_discrete(v) for v in value if not isinstance(v, float)]
    return value


def _float_gap(a: Any, b: Any) -> float:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b)
    if isinstance(a, dict) and isinstance(b, dict):
        return max((_float_gap(a[k], b[k]) for k in a.keys() & b.keys()), default=0.0)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return max((_float_gap(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return 0.0


def _hits(predicted: Any, gold: Any, as_set: bool = False) -> tuple[int, int]:
    if isinstance(gold, list) and isinstance(predicted, list):
        if as_set:  # a set of labels (multi-label): the row is right when the sets are equal
            return int(sorted(map(str, predicted)) == sorted(map(str, gold))), 1
        return sum(p == g for p, g in zip(predicted, gold, strict=False)), len(gold)
    return int(str(predicted) == str(gold)), 1


def _comparable(key: str, rows: list[Any], results: list[dict[str, Any]]) -> tuple[bool, bool]:
    """``(comparable, as_set)`` for a result field that the file's rows also hold: a list answer
    is compared with a list in the file only (a csv cell ``joy|fear`` is another shape), element by
    element when every row's lists have one length (tags), else as a set (labels)."""
    pairs = [
        (r[key], row[key])
        for row, r in zip(rows, results, strict=True)
        if isinstance(row, dict) and key in row and key in r
    ]
    lists = [isinstance(a, list) for a, _ in pairs]
    if any(lists) and not all(isinstance(a, list) and isinstance(b, list) for a, b in pairs):
        return False, False
    return True, any(lists) and any(len(a) != len(b) for a, b in pairs)


def _moved(a: Any, b: Any, as_set: bool) -> int:
    """How many of a field's items differ between two answers (tags: element by element)."""
    if isinstance(a, list) and isinstance(b, list) and not as_set and len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True))
    if as_set and isinstance(a, list) and isinstance(b, list):
        return int(sorted(map(str, a)) != sorted(map(str, b)))
    return int(a != b)


def compare_results(
    rows: list[Any], torch_results: list[dict[str, Any]], onnx_results: list[dict[str, Any]]
) -> dict[str, Any]:
    """The figures described in the module docstring, for results of the same inputs."""
    changed = sum(_discrete(a) != _discrete(b) for a, b in zip(torch_results, onnx_results, strict=True))
    gap = max((_float_gap(a, b) for a, b in zip(torch_results, onnx_results, strict=True)), default=0.0)
    gold: dict[str, Any] = {}
    keys = {
        k for row, r in zip(rows, torch_results, strict=True) if isinstance(row, dict) for k in r.keys() & row.keys()
    }
    for key in sorted(keys):
        if any(isinstance(r.get(key), float) for r in torch_results):
            continue  # a probability or a predicted number: no discrete answer to count as right or wrong
        comparable, as_set = _comparable(key, rows, torch_results)
        if not comparable:
            continue
        counts = {"torch": [0, 0], "onnx": [0, 0]}
        echo = True
        for row, a, b in zip(rows, torch_results, onnx_results, strict=True):
            if not isinstance(row, dict) or key not in row or key not in a:
                continue
            for name, result in (("torch", a), ("onnx", b)):
                hit, total = _hits(result.get(key), row[key], as_set)
                counts[name][0] += hit
                counts[name][1] += total
            echo = echo and a[key] == row[key] == b[key]
        if echo or not counts["torch"][1]:
            continue
        t, o = (counts[n][0] / counts[n][1] for n in ("torch", "onnx"))
        moved = sum(_moved(a.get(key), b.get(key), as_set) for a, b in zip(torch_results, onnx_results, strict=True))
        gold[key] = {
            "torch": round(t, 6),
            "onnx": round(o, 6),
            "change_points": round(100 * (o - t), 4),
            "items": counts["torch"][1],
            "changed": moved,
        }
    return {"inputs": len(rows), "changed": changed, "max_score_diff": gap, "gold": gold}


def refuses(predictor: Any, rows: list[Any], source: str | None) -> str | None:
    """Why the task's predictor does not take the data file's rows as inputs (an mlm run answers
    texts with mask tokens, not its training texts), or ``None`` when it answers the first one."""
    from nlptasks.errors import NlptasksError

    try:
        predictor(rows[:1])
    except NlptasksError as exc:
        return f"not measured: the task's predictor does not take the rows of {source} as inputs ({exc})"
    return None


def rates(
    first: Any, second: Any, rows: list[Any], repeats: int = 2, single_rows: int = 32
) -> tuple[tuple[list[Any], dict[str, float]], tuple[list[Any], dict[str, float], list[Any]]]:
    """Both predictors on ``rows``, timed in turn so that a change of the machine's load during the
    measurement (another job starting or ending) falls on both: after a warm-up of each,
    ``repeats`` rounds (an even number), each timing ``first`` and ``second`` batched (in their own
    batches), then one row at a time on the first ``single_rows``, the first round in the order
    first, second, second, first and the next the other way round.  Each side's speed is its mean
    over the rounds: a load that grows or falls steadily costs both sides the same (the best of the
    passes would favour the side timed at the quietest moment).  Returns ``((results, speed),
    (results, speed, singles))``: each side's batched answers and ``{"batched": rows/s, "single":
    rows/s}``, and ``second``'s answers one at a time."""
    import time

    sides = (first, second)
    few = rows[:single_rows]
    for predictor in sides:
        predictor(rows[:8])
    spent = [[0.0, 0.0], [0.0, 0.0]]  # seconds, [side][batched, single]
    results: list[list[Any]] = [[], []]
    singles: list[Any] = []
    for round_ in range(repeats):
        order = (0, 1) if round_ % 2 == 0 else (1, 0)
        for side in order:  # batched
            started = time.perf_counter()
            results[side] = sides[side](rows)
            spent[side][0] += time.perf_counter() - started
        for side in reversed(order):  # one row at a time
            started = time.perf_counter()
            answers = [answer for row in few for answer in sides[side]([row])]
            spent[side][1] += time.perf_counter() - started
            if side == 1:
                singles = answers

    def speed(side: int) -> dict[str, float]:
        return {
            "batched": round(repeats * len(rows) / max(spent[side][0], 1e-9), 1),
            "single": round(repeats * len(few) / max(spent[side][1], 1e-9), 1),
        }

    return (results[0], speed(0)), (results[1], speed(1), singles)


def batch_dependence(batched: list[Any], singles: list[Any]) -> str | None:
    """Why answers given one at a time (``singles``, of the first rows) are not those given in a
    batch (``batched``): a discrete answer differs, or a float by more than
    :data:`~nlptasks.inference.deployments.BATCH_TOLERANCE`; ``None`` when they are the same."""
    from nlptasks.inference.deployments import BATCH_TOLERANCE

    pairs = list(zip(batched, singles, strict=False))
    changed = sum(_discrete(a) != _discrete(b) for a, b in pairs)
    gap = max((_float_gap(a, b) for a, b in pairs), default=0.0)
    if changed:
        return f"{changed} of {len(pairs)} answers change between one at a time and batched"
    if gap > BATCH_TOLERANCE:
        return f"floats move by up to {gap:.1e} between one at a time and batched (more than {BATCH_TOLERANCE:.0e})"
    return None


def measure_deployment(
    run_dir: Path,
    manifest: dict[str, Any],
    out: Path,
    label: str,
    torch_predictor: Any,
    other: Any,
    rows_limit: int = 1000,
    batch_independent: bool = True,
    backend: str = "onnx",
    precision: str | None = None,
    single_rows: int = 32,
) -> dict[str, Any] | None:
    """The configuration ``other`` (``label``: how it answers, ``onnx int8`` or ``torch bf16``; the
    folder ``out`` with ``backend`` and ``precision``) against the fp32 torch weights of the run
    ``run_dir`` (its ``manifest``) on up to ``rows_limit`` of the run's validation rows (else
    training rows, never test rows): answers compared, agreement
    (:func:`nlptasks.inference.deployments.agreement`), whether its answers one at a time are its
    batched ones (:func:`batch_dependence`: a configuration whose are not never agrees), rows per
    second of each side; the entry ``RUN/deployments.json`` records (``None``: no local rows to
    measure on)."""
    import datetime as _dt

    import torch

    split, source, rows = sample_rows(manifest, rows_limit, ("validation", "train"))
    if not rows or refuses(torch_predictor, rows, source):
        return None  # not measured: a load with auto options never answers with it
    (torch_results, run_speed), (results, speed, singles) = rates(torch_predictor, other, rows, single_rows=single_rows)
    compared = compare_results(rows, torch_results, results)
    agrees, why = agreement(compared)
    depends = batch_dependence(results, singles)
    if not batch_independent:  # opt-in only: auto never answers with what depends on its batch
        depends = depends or "its scales are computed per batch (dynamic quantization)"
    if depends:
        agrees, why = False, f"{why}; but its answers depend on the rows batched with it: {depends}"
    entry = {
        "folder": str(out.resolve()),
        "backend": backend,
        "label": label,
        "split": split,
        "file": source,
        "rows": len(rows),
        "compared": compared,
        "agrees": agrees,
        "why": why,
        "speed": speed,
        "run_speed": run_speed,
        "run_precision": "fp32",
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "run_digest": folder_digest(run_dir),
    }
    if precision is not None:
        entry["precision"] = precision
    return entry


MEASURE_SECONDS = 30.0
"""About how long :func:`measure_precisions` may take at the end of a run (both precisions, batched
and one at a time): fewer rows for a slow predictor (a generating one), none when even 16 would take
longer."""


def measure_precisions(
    run_dir: Path, rows_limit: int = 128, single_rows: int = 16, budget: float = MEASURE_SECONDS
) -> dict[str, Any] | str | None:
    """At the end of ``nlptasks run``: where this machine's CPU computes in bf16 natively (and there is
    no GPU: a run on a GPU loads there), the run's own weights in bf16 measured against them in fp32
    (:func:`measure_deployment` on up to ``rows_limit`` validation rows, ``single_rows`` of them one
    at a time too, fewer where the predictor is too slow for ``budget`` seconds) and recorded in
    ``RUN/deployments.json``: loads with every choice ``auto`` answer in bf16 only while it agrees,
    does not depend on the batch and is faster; once measured, in fp32 otherwise
    (:mod:`nlptasks.inference.deployments`).  Returns the entry, or why nothing was measured (a
    string), or ``None`` where there is nothing to choose between."""
    import time

    import torch

    from nlptasks.engine.io.rundir import read_manifest
    from nlptasks.engine.system.machine import cpu_has_bf16
    from nlptasks.inference.deployments import record_deployment
    from nlptasks.inference.loading import load_predictor
    from nlptasks.types import LoadOptions

    if torch.cuda.is_available() or not cpu_has_bf16():
        return None
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    fp32 = load_predictor(run_dir, LoadOptions(backend="torch", precision="fp32", device="cpu"))
    _, source, probe = sample_rows(manifest, 8, ("validation", "train"))
    if not probe or refuses(fp32, probe, source):
        return None
    started = time.perf_counter()
    fp32(probe)
    per_row = (time.perf_counter() - started) / len(probe)
    # each side (:func:`rates`): a warm-up of 8 rows, two batched passes, two passes of the rows one at a
    # time (each about 3x a batched row)
    rows = int((budget / (2 * max(per_row, 1e-6)) - 8 - 2 * 3 * single_rows) / 2)
    if rows < 16:
        return f"not measured: the predictor takes {per_row:.2f} s a row, more than {budget:.0f} s for 16 rows"
    bf16 = load_predictor(run_dir, LoadOptions(backend="torch", precision="bf16", device="cpu"))
    entry = measure_deployment(
        run_dir,
        manifest,
        run_dir,
        "torch bf16",
        fp32,
        bf16,
        min(rows_limit, rows),
        backend="torch",
        precision="bf16",
        single_rows=single_rows,
    )
    if entry is not None:
        entry["folder_digest"] = folder_digest(run_dir)
        record_deployment(run_dir, entry)
    return entry
