"""``nlptasks export RUN --onnx OUT``: the export (:func:`nlptasks.inference.onnx_export.export_onnx`)
and its measurement through the task's own predictor.

After exporting, the run's predictor is loaded twice, on the torch run and on the ONNX folder, and
called on the inputs of the run's test file (up to ``rows``; validation, then train, when the run
had no test file): every result is compared field by field.  Measured, and written into the
exported manifest (``onnx.measured``) and model card:

* ``changed``: inputs whose discrete results (labels, tags, entity types and spans: every value
  that is not a float) differ between torch and ONNX;
* ``max_score_diff``: the largest difference of any float (scores, similarities);
* ``gold``: for each discrete result field that the file's rows also hold (a ``label`` column,
  ner's ``tags``, a multi-label run's ``labels``; not a float such as a pair run's predicted
  ``score`` beside a 0-5 ``score`` column, nor a list beside a csv cell), the accuracy of torch
  and of ONNX against the file and the change in points (lists such as tags, one per token, count
  element by element; lists of another length than the file's, such as a multi-label run's
  labels, count a row as right when they hold the same items).  A field equal to the file's in every row for both
  backends is left out: the input's echo (the text, the tokens), or nothing to report.

``export`` warns when a gold accuracy drops by more than ``max_drop`` points.

The export is a run of its own: its ``metrics.json`` is not the torch run's but what ``nlptasks
eval`` measures for the export on the run's test file (else validation), through the same path
(the eval folder is kept under ``OUT/eval/export``), so the card, ``nlptasks eval OUT`` and
``nlptasks compare RUN OUT`` give the same figures; it records where they came from
(``measured``) and the run it was exported from, with that run's own metrics (``exported_from``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.engine.io.outputs import atomic_folder
from nlptasks.engine.io.rundir import MANIFEST, mark_complete, read_manifest, write_json, write_text_atomic
from nlptasks.engine.system.machine import cpu_name
from nlptasks.inference.deployments import DEPLOYMENTS, agreement, folder_digest, record_deployment, refusal, speedups
from nlptasks.inference.loading import load_predictor
from nlptasks.inference.onnx_export import DEFAULT_OPSET, export_onnx
from nlptasks.inference.onnx_quantize import CALIBRATION_ROWS
from nlptasks.inference.streaming import iter_file
from nlptasks.types import LoadOptions

__all__ = ["compare_results", "export_and_measure", "measure", "measure_deployment", "refuses", "sample_rows"]


def sample_rows(
    manifest: dict[str, Any], limit: int, splits: tuple[str, ...] = ("test", "validation", "train")
) -> tuple[str | None, str | None, list[Any]]:
    """``(split, file, rows)``: up to ``limit`` rows of the run's first split in ``splits`` (test,
    else validation, else train) that is a local file the generic reader reads, as the dicts a
    predictor takes; ``(None, None, [])`` when there is none."""
    sources = (manifest.get("data") or {}).get("sources") or {}
    for split in splits:
        source = sources.get(split)
        if not isinstance(source, str) or not Path(source).is_file():
            continue
        rows = []
        try:
            for row in iter_file(Path(source)):
                rows.append(row)
                if len(rows) >= limit:
                    break
        except Exception:  # noqa: BLE001 - a format the generic reader does not know: no measurement
            continue
        if rows:
            return split, source, rows
    return None, None, []


def _own_metrics(run_dir: Path, work: Path, out: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The export's ``metrics.json``: ``nlptasks eval`` of the (complete) export folder ``work``
    (renamed to ``out`` when done) on the run's test file (else validation), or ``None`` when the
    run has no such local file."""
    import json

    from nlptasks.pipeline.evaluate import evaluate_run

    sources = (manifest.get("data") or {}).get("sources") or {}
    exported_from = _read_json(run_dir / "metrics.json")
    for split in ("test", "validation"):
        source = sources.get(split)
        if not isinstance(source, str) or not Path(source).is_file():
            continue
        folder = work / "eval" / "export"
        (result,) = evaluate_run(work, [source], output=folder, options=LoadOptions(backend="onnx"))
        record = _read_json(folder / "metrics.json")
        write_json(folder / "metrics.json", {**record, "run": str(out)})  # not the temporary folder's name
        return json.loads(
            json.dumps(
                {
                    split: result.metrics,
                    "measured": {
                        "by": f"nlptasks eval {out} --data {source} --backend onnx",
                        "split": split,
                        "file": source,
                        "rows": result.rows,
                        "examples": result.examples,
                        "seconds": round(result.seconds, 1),
                    },
                    "exported_from": {"run": str(run_dir.resolve()), "metrics": exported_from},
                },
                default=str,
            )
        )
    return None


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


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
        gold[key] = {
            "torch": round(t, 6),
            "onnx": round(o, 6),
            "change_points": round(100 * (o - t), 4),
            "items": counts["torch"][1],
        }
    return {"inputs": len(rows), "changed": changed, "max_score_diff": gap, "gold": gold}


def measure(
    manifest: dict[str, Any], torch_predictor: Any, onnx_predictor: Any, rows_limit: int = 2000
) -> dict[str, Any]:
    """Compare the torch run (its ``manifest``) and its ONNX export through the task's predictor on
    the run's test inputs (see the module docstring)."""
    _, source, rows = sample_rows(manifest, rows_limit)
    if not rows:
        return {"inputs": 0, "note": "the run has no local test, validation or train file to measure on"}
    refused = refuses(torch_predictor, rows, source)
    if refused:
        return {"inputs": 0, "note": refused}
    result = compare_results(rows, torch_predictor(rows), onnx_predictor(rows))
    result["file"] = source
    return result


def refuses(predictor: Any, rows: list[Any], source: str | None) -> str | None:
    """Why the task's predictor does not take the data file's rows as inputs (an mlm run answers
    texts with mask tokens, not its training texts), or ``None`` when it answers the first one."""
    from nlptasks.errors import NlptasksError

    try:
        predictor(rows[:1])
    except NlptasksError as exc:
        return f"not measured: the task's predictor does not take the rows of {source} as inputs ({exc})"
    return None


def _rates(
    predictor: Any, rows: list[Any], repeats: int = 2, single_rows: int = 32
) -> tuple[list[Any], dict[str, float]]:
    """``(results, {"batched": rows/s, "single": rows/s})``: ``predictor`` on ``rows`` in its own
    batches (best of ``repeats``, after a warm-up) and one row at a time on the first ``single_rows``."""
    import time

    predictor(rows[:8])
    best, results = float("inf"), []
    for _ in range(repeats):
        started = time.perf_counter()
        results = predictor(rows)
        best = min(best, time.perf_counter() - started)
    few = rows[:single_rows]
    started = time.perf_counter()
    for row in few:
        predictor([row])
    single = time.perf_counter() - started
    return results, {"batched": round(len(rows) / best, 1), "single": round(len(few) / single, 1)}


def measure_deployment(
    run_dir: Path,
    manifest: dict[str, Any],
    out: Path,
    label: str,
    torch_predictor: Any,
    onnx_predictor: Any,
    rows_limit: int = 512,
    batch_independent: bool = True,
) -> dict[str, Any] | None:
    """The export ``out`` (``label``: how it was made, ``onnx int8``) against the fp32 torch weights of
    the run ``run_dir`` (its ``manifest``) on up to
    ``rows_limit`` of the run's validation rows (else training rows, never test rows): answers
    compared, agreement (:func:`nlptasks.inference.deployments.agreement`), rows per second of each
    side; the entry ``RUN/deployments.json`` records (``None``: no local rows to measure on)."""
    import datetime as _dt

    import torch

    split, source, rows = sample_rows(manifest, rows_limit, ("validation", "train"))
    if not rows or refuses(torch_predictor, rows, source):
        return None  # not measured: a load with auto options never answers with it
    torch_results, run_speed = _rates(torch_predictor, rows)
    onnx_results, speed = _rates(onnx_predictor, rows)
    compared = compare_results(rows, torch_results, onnx_results)
    agrees, why = agreement(compared)
    if not batch_independent:  # opt-in only: auto never answers with what depends on its batch
        agrees, why = False, f"{why}; but its answers depend on the rows batched with it (dynamic quantization)"
    return {
        "folder": str(out.resolve()),
        "backend": "onnx",
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


def _quantization_lines(how: dict[str, Any]) -> list[str]:
    """What the card says about how the export was quantized (nothing for fp32)."""
    if how.get("method") == "static":
        source = how.get("calibration") or {}
        return [
            f"int8: static quantization ({how.get('format')}), weights {how.get('weights')}; activation scales "
            f"calibrated ({how.get('calibration_method')}) on {source.get('rows')} rows of `{source.get('file')}` "
            f"({source.get('split')}, {source.get('through')}) and fixed: a row's answer does not depend on its batch."
        ]
    if how.get("method") == "dynamic":
        return [
            f"int8: dynamic quantization, weights {how.get('weights')}; activation scales are computed per batch "
            "at run time, so a row's scores (and on near-ties its label) depend on the rows batched with it."
        ]
    return []


def _own_lines(own: dict[str, Any] | None) -> list[str]:
    """The card's section of the export's own metrics (``metrics.json``)."""
    if own is None:
        return ["No metrics of its own: the run has no local test or validation file to evaluate the export on.", ""]
    how = own["measured"]
    figures = own[how["split"]]
    shown = [
        k
        for k, v in figures.items()
        if isinstance(v, float) and "/" not in k and not k.endswith(("runtime", "per_second"))
    ]
    before = (own["exported_from"]["metrics"] or {}).get(how["split"]) or {}
    lines = [
        f"## {how['split'].capitalize()} metrics of this export (`metrics.json`)",
        "",
        f"Measured by `{how['by']}`: {how['rows']} rows, {how['examples']} examples scored.",
        "",
        "| metric | this export | the exported run |",
        "|---|---|---|",
    ]
    for key in shown:
        old = before.get(key)
        lines.append(f"| {key} | {figures[key]:.4f} | " + (f"{old:.4f}" if isinstance(old, float) else "—") + " |")
    return [*lines, ""]


def _deployment_lines(entry: dict[str, Any] | None, run_dir: Path) -> list[str]:
    """The card's section on whether loads of the run answer with this export."""
    if not entry:
        return []
    speed, base = entry["speed"], entry["run_speed"]
    batched, single = speedups(entry) or (0.0, 0.0)
    why = refusal(entry)
    verdict = (
        f"Loads of `{run_dir}` with every choice `auto` answer with this export on this machine's CPU "
        "(`--backend torch`: the run's own weights)."
        if why is None
        else f"Loads of `{run_dir}` keep answering with the run's own weights: {why}."
    )
    return [
        f"## Against the run's fp32 weights on {entry['rows']} {entry['split']} rows",
        "",
        f"Agreement: {entry['why']}. Rows/s batched {speed['batched']} vs {base['batched']} ({batched:.2f}x), "
        f"one at a time {speed['single']} vs {base['single']} ({single:.2f}x), {entry['threads']} thread(s), "
        f"{entry['cpu']}. {verdict}",
        "",
    ]


def _card(run_dir: Path, out: Path, manifest: dict[str, Any], own: dict[str, Any] | None = None) -> str:
    info = manifest["onnx"]
    sizes = ", ".join(f"{k.replace('_bytes', '')} {v / 1e6:.2f} MB" for k, v in info["sizes"].items())
    lines = [
        f"# ONNX export of `{run_dir.name}`",
        "",
        f"Exported from `{info['exported_from']}` by `nlptasks export --onnx` ({info['exporter']}), opset "
        f"{info['opset']}, quantization **{info['quantize']}**; file sizes: {sizes}.",
        f"Inputs {', '.join(info['inputs'])} (dynamic batch and sequence); outputs "
        + ", ".join(f"{k} {v}" for k, v in info["outputs"].items())
        + ".",
        f"Graph check against torch: largest difference {info['check']['max_abs_diff']:.1e} at shapes "
        f"{info['check']['shapes']}.",
        *_quantization_lines(info.get("quantization") or {}),
        "",
        *_own_lines(own),
    ]
    lines += _deployment_lines(info.get("deployment"), run_dir)
    measured = info.get("measured") or {}
    if measured.get("inputs"):
        lines += [
            f"## Measured on {measured['inputs']} inputs of `{measured['file']}`",
            "",
            f"- predictions that differ from torch: **{measured['changed']}** of {measured['inputs']}",
            f"- largest score difference: {measured['max_score_diff']:.2e}",
        ]
        if measured["gold"]:
            lines += ["", "| field | torch | ONNX | change (points) |", "|---|---|---|---|"]
            lines += [
                f"| {k} | {v['torch']:.4f} | {v['onnx']:.4f} | {v['change_points']:+.2f} |"
                for k, v in measured["gold"].items()
            ]
    else:
        lines.append(f"Not measured: {measured.get('note', 'no inputs')}.")
    lines += [
        "",
        "## Use",
        "",
        "```bash",
        f'nlptasks infer --model {out} "..."   # ONNX Runtime, picked automatically',
        "```",
        "",
        "```python",
        "import nlptasks",
        "",
        f"predict = nlptasks.load({str(out)!r})",
        "```",
        "",
    ]
    original = run_dir / "README.md"
    if original.exists():
        lines += ["---", "", "The card of the exported run follows.", "", original.read_text(encoding="utf-8")]
    return "\n".join(lines)


def export_and_measure(
    run_dir: Path,
    out: Path,
    quantize: str = "none",
    opset: int = DEFAULT_OPSET,
    adapter: str | None = None,
    rows: int = 2000,
    max_drop: float = 1.0,
    int8_weights: str = "auto",
    calibration_rows: int = CALIBRATION_ROWS,
) -> tuple[dict[str, Any], list[str]]:
    """Export, measure (:func:`measure`) and write the figures into ``OUT``'s manifest and card.

    Returns ``(manifest, warnings)``: a warning per gold accuracy that drops by more than
    ``max_drop`` points, and for fp32 per changed prediction count."""
    with atomic_folder(out, "--onnx", {"RUN": run_dir}) as work:  # renamed to OUT once complete
        manifest = export_onnx(
            run_dir,
            work,
            quantize=quantize,
            opset=opset,
            adapter=adapter,
            int8_weights=int8_weights,
            calibration_rows=calibration_rows,
        )
        run_manifest = read_manifest(run_dir)
        torch_predictor = load_predictor(run_dir, LoadOptions(precision="fp32", backend="torch"))
        onnx_predictor = load_predictor(work, LoadOptions(backend="onnx"))
        measured = (
            measure(run_manifest, torch_predictor, onnx_predictor, rows)
            if rows > 0
            else {"inputs": 0, "note": "--check-rows 0"}
        )
        manifest["onnx"]["measured"] = measured
        deployment = (
            measure_deployment(
                run_dir,
                run_manifest,
                out,
                f"onnx {quantize}",
                torch_predictor,
                onnx_predictor,
                batch_independent=(manifest["onnx"].get("quantization") or {}).get("batch_independent", True),
            )
            if adapter is None
            else None
        )
        del torch_predictor, onnx_predictor
        if deployment is not None:
            manifest["onnx"]["deployment"] = {k: v for k, v in deployment.items() if k != "compared"}
        own = _own_metrics(run_dir, work, out, run_manifest)
        if own is None:  # no file to measure on: the run's figures are not the export's
            (work / "metrics.json").unlink(missing_ok=True)
        else:
            write_json(work / "metrics.json", own)
        write_json(work / MANIFEST, manifest)
        write_text_atomic(work / "README.md", _card(run_dir, out, manifest, own))
        mark_complete(work)  # sealed again: the manifest changed
        if deployment is not None:
            deployment["folder_digest"] = folder_digest(work)
    warnings = []
    if deployment is not None:  # once the folder is in place under its name: then auto may answer with it
        try:
            record_deployment(run_dir, deployment)
        except OSError as exc:
            warnings.append(
                f"cannot record the export in {run_dir / DEPLOYMENTS} ({exc.strerror or exc}): loads of the run "
                f"keep answering with its own weights; use the export by its folder: {out}"
            )
    for key, figures in measured.get("gold", {}).items():
        if -figures["change_points"] > max_drop:
            warnings.append(
                f"{quantize} ONNX loses {-figures['change_points']:.2f} points of {key} accuracy on "
                f"{measured['file']} (torch {figures['torch']:.4f}, ONNX {figures['onnx']:.4f}); "
                f"--max-drop is {max_drop}"
            )
    if quantize == "none" and measured.get("changed"):
        warnings.append(
            f"fp32 ONNX changes {measured['changed']} of {measured['inputs']} predictions "
            "(expected 0: please report it)"
        )
    return manifest, warnings
