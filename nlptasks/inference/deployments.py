"""What ``auto`` answers a run with: the fastest configuration that this run has shown to agree with
its own fp32 weights, on this machine.

Two things are measured against the run's torch weights in fp32, on the run's validation rows
(else its training rows; never its test rows, which stay for reporting), and recorded in
``RUN/deployments.json``, one entry per configuration:

* ``nlptasks export RUN --onnx OUT`` (any ``--quantize``) measures the export ``OUT``;
* ``nlptasks run`` measures, at its end, the run's own weights in bf16 where the CPU computes in
  bf16 natively (:func:`nlptasks.pipeline.measuring.measure_precisions`).

Each entry holds the answers compared (:func:`agreement`), whether the configuration's answers one
at a time are its batched ones, the rows per second of each side batched and one at a time, the
machine and the checksums of the folders.  A later load of ``RUN`` with every choice left to
``auto`` (``LoadOptions()``: ``nlptasks infer``, ``serve``, ``eval`` and ``nlptasks.load`` without
``--backend``, ``--precision``, ``--adapter``) answers with the recorded configuration that

* agrees: every discrete field the validation file holds (a ``label``, ner's ``tags``) scores
  within :data:`TOLERANCE_POINTS` points of fp32 torch at 95% confidence (the observed drop plus
  1.645 sqrt(changed)/items: with 5% of 900 labels changed, a drop measured as 0.2 points may be 1.5
  on other rows, so it does not agree; with none changed it agrees), or, where there is none to score, the
  discrete answers are identical and floats within :data:`FLOAT_TOLERANCE`; and its answers do
  not depend on the batch (the same discrete answers one at a time, floats within
  :data:`BATCH_TOLERANCE`; an ``int8-dynamic`` export never qualifies);
* was measured on this machine's CPU (speed is a property of the machine) and loads on the CPU;
* is faster: at least :data:`MIN_SPEEDUP` times the run's rows per second batched, and not slower
  one at a time;
* is still the folder that was measured (its ``SHA256SUMS`` unchanged, exported from this run,
  whose ``SHA256SUMS`` is unchanged too);

the fastest of them (by its speed-up over fp32 batched).  Otherwise the run's own weights answer:
in fp32 when its precisions were measured on this CPU (bf16 did not qualify), else in the
precision :func:`nlptasks.inference.precision.auto_precision` gives (a run measured nowhere: one
trained before these measurements, or on a GPU).  The choice is logged (``nlptasks`` logger, INFO)
with its figures and the flag that turns it off (``--backend torch``, ``--precision fp32``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlptasks.engine.io.checksums import SUMS
from nlptasks.engine.io.rundir import COMPLETE, write_json
from nlptasks.engine.system.machine import cpu_name
from nlptasks.types import LoadOptions

__all__ = [
    "BATCH_TOLERANCE",
    "DEPLOYMENTS",
    "FLOAT_TOLERANCE",
    "MIN_SPEEDUP",
    "TOLERANCE_POINTS",
    "Choice",
    "agreement",
    "choose_deployment",
    "folder_digest",
    "refusal",
    "speedups",
    "read_deployments",
    "record_deployment",
]

DEPLOYMENTS = "deployments.json"
TOLERANCE_POINTS = 0.3
"""Largest drop, in points of accuracy of a discrete field, that still counts as agreeing with fp32."""
FLOAT_TOLERANCE = 1e-3
"""Largest float difference that agrees with fp32 where the task has no discrete field to score."""
BATCH_TOLERANCE = 1e-4
"""Largest float difference between a row's answer alone and in a batch that still counts as not
depending on the batch (the parity tests' tolerance in fp32)."""
CONFIDENCE_Z = 1.645
"""One-sided 95%: a configuration agrees only when its accuracy drop, bounded at this confidence, is
within :data:`TOLERANCE_POINTS` (:func:`agreement`)."""
MIN_SPEEDUP = 1.05
"""A deployment answers for the run only when it measured at least this much faster (noise margin)."""

_log = logging.getLogger("nlptasks")


@dataclass(frozen=True)
class Choice:
    """The folder a load reads and the options it reads it with."""

    folder: Path
    options: LoadOptions


def folder_digest(folder: Path) -> str | None:
    """The sha256 of ``folder``'s ``SHA256SUMS`` (which names every file loading reads): the folder's
    identity, changed by any change of its weights; ``None`` for a folder without it."""
    try:
        return hashlib.sha256((folder / SUMS).read_bytes()).hexdigest()
    except OSError:
        return None


def _worst_drop(field: Mapping[str, Any], measured: Mapping[str, Any]) -> tuple[float, int, int]:
    """``(bound, changed, items)``: how many points a field's accuracy may drop at most (one-sided 95%),
    from the observed change and the number of items whose answer changed: each changed answer went
    either way, so the net change has a spread of about sqrt(changed) items."""
    items = max(int(field.get("items") or 0), 1)
    changed = int(field.get("changed", measured.get("changed") or 0))
    margin = 100 * CONFIDENCE_Z * math.sqrt(changed) / items
    return -float(field["change_points"]) + margin, changed, items


def agreement(measured: Mapping[str, Any]) -> tuple[bool, str]:
    """``(agrees, why)`` for a comparison of answers (``nlptasks.pipeline.onnx.compare_results``:
    ``inputs``, ``changed``, ``max_score_diff``, ``gold``), by the rule of the module docstring."""
    gold = measured.get("gold") or {}
    if not measured.get("inputs"):
        return False, "no rows to compare on"
    if gold:
        bounds = {k: _worst_drop(v, measured) for k, v in gold.items()}
        worst = max(bounds, key=lambda k: bounds[k][0])
        figures = ", ".join(f"{k} {v['torch']:.4f} → {v['onnx']:.4f}" for k, v in gold.items())
        bound, changed, items = bounds[worst]
        if bound > TOLERANCE_POINTS:
            return False, (
                f"{figures}: {changed} of {items} {worst} answers changed, so {worst} may drop by up to {bound:.2f} "
                f"points (95% bound; more than {TOLERANCE_POINTS})"
            )
        return True, f"{figures} (at most {bound:.2f} points lower at 95%; {TOLERANCE_POINTS} allowed)"
    gap = float(measured.get("max_score_diff") or 0.0)
    if measured.get("changed"):
        return False, f"{measured['changed']} of {measured['inputs']} answers differ and none can be scored"
    if gap > FLOAT_TOLERANCE:
        return False, f"floats differ by up to {gap:.1e} (more than {FLOAT_TOLERANCE:.0e}) and none can be scored"
    return True, f"the same answers on {measured['inputs']} rows, floats within {gap:.1e}"


def read_deployments(run_dir: Path) -> list[dict[str, Any]]:
    """The entries of ``run_dir/deployments.json`` (``[]`` when there is none or it cannot be read:
    a damaged record is not trusted, the run's own weights answer)."""
    try:
        value = json.loads((Path(run_dir) / DEPLOYMENTS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        _log.warning("%s: ignored (%s); the run's own weights answer", Path(run_dir) / DEPLOYMENTS, exc)
        return []
    entries = value.get("deployments") if isinstance(value, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    with (run_dir / f".{DEPLOYMENTS}.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def record_deployment(run_dir: Path, entry: Mapping[str, Any]) -> None:
    """Add ``entry`` (its ``folder`` absolute) to ``run_dir/deployments.json``, replacing an earlier
    entry for the same folder; concurrent exports of one run each keep theirs (a lock)."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        entries = [e for e in read_deployments(run_dir) if e.get("folder") != entry["folder"]]
        write_json(run_dir / DEPLOYMENTS, {"deployments": [*entries, dict(entry)]})


def _asks_auto(options: LoadOptions) -> bool:
    return (
        options.backend == "auto"
        and options.precision == "auto"
        and options.device in ("auto", "cpu")
        and options.adapter is None
        and not options.base_only
    )


def _usable(entry: Mapping[str, Any], run_dir: Path, run_digest: str | None, cpu: str) -> str | None:
    """Why ``entry`` cannot answer for the run now (``None``: it can)."""
    folder = Path(str(entry.get("folder", "")))
    if entry.get("cpu") != cpu:
        return f"measured on another CPU ({entry.get('cpu')})"
    if not (folder / COMPLETE).is_file():
        return "the folder is gone or incomplete"
    if entry.get("folder_digest") != folder_digest(folder):
        return "the folder changed since it was measured"
    if entry.get("run_digest") != run_digest:
        return "the run changed since it was measured"
    return refusal(entry)


def speedups(entry: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(batched, one at a time)``: the deployment's rows/s over its run's (``None``: not recorded)."""
    speed, base = entry.get("speed") or {}, entry.get("run_speed") or {}
    try:
        return float(speed["batched"]) / float(base["batched"]), float(speed["single"]) / float(base["single"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def refusal(entry: Mapping[str, Any]) -> str | None:
    """Why the measured figures of ``entry`` do not let it answer for its run: it did not agree, or
    is not faster by the rule of the module docstring (``None``: they do; where and whether the
    folder is still the one measured is :func:`choose_deployment`'s to check)."""
    if not entry.get("agrees"):
        return "it does not agree with the run's fp32 weights"
    ratios = speedups(entry)
    if ratios is None:
        return "no speed recorded"
    batched, single = ratios
    if batched < MIN_SPEEDUP or single < 1.0:
        return f"not faster ({batched:.2f}x batched, {single:.2f}x one at a time; needs {MIN_SPEEDUP}x and 1x)"
    return None


def choose_deployment(run_dir: Path, manifest: Mapping[str, Any], options: LoadOptions) -> Choice:
    """The folder and options a load of ``run_dir`` with ``options`` reads (module docstring)."""
    run_dir = Path(run_dir)
    if not _asks_auto(options) or manifest.get("backend") not in (None, "torch"):
        return Choice(run_dir, options)
    entries = read_deployments(run_dir)
    if not entries:
        return Choice(run_dir, options)
    import torch

    if options.device == "auto" and torch.cuda.is_available():
        return Choice(run_dir, options)  # measured on the CPU; the run's weights go to the GPU
    run_digest, cpu = folder_digest(run_dir), cpu_name()
    usable, precisions = [], []
    for entry in entries:
        why = _usable(entry, run_dir, run_digest, cpu)
        if entry.get("backend") == "torch" and entry.get("cpu") == cpu and entry.get("run_digest") == run_digest:
            precisions.append((entry, why))
        if why is None:
            usable.append(entry)
        else:
            _log.debug("%s: recorded configuration %s not used: %s", run_dir, entry.get("label"), why)
    if not usable:
        if not precisions:
            return Choice(run_dir, options)
        entry, why = precisions[-1]
        # said where it changes what the run answers in (a bf16 run in fp32); an fp32 run stays as it was
        say = _log.info if manifest.get("precision") in ("bf16", "fp16") else _log.debug
        say(
            "answering with %s in fp32: %s was measured on %s rows of %s and is not used: %s",
            run_dir,
            entry.get("label"),
            entry.get("rows"),
            entry.get("file"),
            why,
        )
        return Choice(run_dir, options.but(backend="torch", precision="fp32"))
    best = max(usable, key=lambda e: (speedups(e) or (0.0, 0.0))[0])
    folder = Path(best["folder"])
    batched, single = speedups(best) or (0.0, 0.0)
    torch_entry = best.get("backend") == "torch"
    _log.info(
        "answering with %s (%s): measured on %s rows of %s: %s; %.2fx the run's fp32 rows/s batched, %.2fx one at "
        "a time. For the run's own weights in fp32: %s",
        folder,
        best.get("label", best.get("backend")),
        best.get("rows"),
        best.get("file"),
        best.get("why"),
        batched,
        single,
        "--precision fp32" if torch_entry else "--backend torch",
    )
    chosen = options.but(backend=str(best.get("backend", "auto")))
    if torch_entry:  # the run itself, as it was given (its adapter chosen), in the measured precision
        return Choice(run_dir, chosen.but(precision=str(best.get("precision", "fp32"))))
    return Choice(folder, chosen)
