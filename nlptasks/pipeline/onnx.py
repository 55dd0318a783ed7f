"""``nlptasks export RUN --onnx OUT``: the export (:func:`nlptasks.inference.onnx_export.export_onnx`)
and its measurement through the task's own predictor.

After exporting, the run's predictor is loaded twice, on the torch run and on the ONNX folder, and
called on the inputs of the run's test file (up to ``rows``; validation, then train, when the run
had no test file): every result is compared field by field
(:func:`nlptasks.pipeline.measuring.compare_results`: changed answers, the largest float
difference, the accuracy of each side on the fields the file holds), and the figures written into
the exported manifest (``onnx.measured``) and model card.

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
from nlptasks.inference.deployments import DEPLOYMENTS, folder_digest, record_deployment, refusal, speedups
from nlptasks.inference.loading import load_predictor
from nlptasks.inference.onnx_export import DEFAULT_OPSET, export_onnx
from nlptasks.inference.onnx_quantize import CALIBRATION_ROWS
from nlptasks.pipeline.measuring import compare_results, measure_deployment, refuses, sample_rows
from nlptasks.types import LoadOptions

__all__ = [
    "compare_results",
    "export_and_measure",
    "measure",
    "measure_deployment",
    "refuses",
    "sample_rows",
    "try_command",
    "what_loads_use",
]


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


def _quantization_lines(how: dict[str, Any]) -> list[str]:
    """What the card says about how the export was quantized (nothing for fp32)."""
    if how.get("method") == "per-token":
        source = how.get("calibration") or {}
        smoothing = how.get("smoothing") or {}
        smoothed = (
            f"; SmoothQuant divisors (alpha {smoothing.get('alpha')}) calibrated on {source.get('rows')} rows of "
            f"`{source.get('file')}` ({source.get('split')}, {source.get('through')}) and fixed"
            if smoothing
            else "; not smoothed"
        )
        return [
            f"int8: {how.get('layers')} linear layers with weights {how.get('weights')}; each token's activations "
            f"are quantized with a scale and zero point computed from that token alone{smoothed}: a row's answer "
            "does not depend on its batch."
        ]
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


def what_loads_use(run_dir: Path) -> tuple[Path, str, str]:
    """``(folder, backend, precision)`` a load of ``run_dir`` with every choice ``auto`` answers with
    on this machine, as :func:`~nlptasks.inference.loading.prepare_load` decides it: what ``export``
    says comes next is this, not a guess from its own measurement alone (another recorded
    configuration, bf16 say, may be faster still)."""
    import logging

    from nlptasks.inference.loading import prepare_load

    logger = logging.getLogger("nlptasks")
    level = logger.level
    logger.setLevel(logging.WARNING)  # its "answering with ..." line: export says it in one line
    try:
        prepared = prepare_load(Path(run_dir), LoadOptions())
    finally:
        logger.setLevel(level)
    options = prepared.options
    precision = options.precision if options.precision != "auto" else prepared.manifest.get("precision", "fp32")
    if options.backend == "onnx":  # an export's numbers: fp32, or its int8 quantization
        quantize = (prepared.manifest.get("onnx") or {}).get("quantize", "none")
        precision = "fp32" if quantize in (None, "none") else str(quantize)
    return Path(prepared.folder), str(options.backend), str(precision)


def try_command(folder: Path, shown: str) -> str:
    """An ``nlptasks infer`` command for ``folder`` (a run or an export) with its task's example input
    (the run's own test data, as ``run``'s ``try:`` line), the folder written as ``shown``."""
    from nlptasks.engine.reports.card import infer_command
    from nlptasks.host import get_host

    manifest = read_manifest(Path(folder))
    return infer_command(shown, get_host().task(manifest["task"]).usage_for(manifest))
