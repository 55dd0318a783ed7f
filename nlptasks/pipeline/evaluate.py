"""``nlptasks eval``: a trained run scored on new labelled data, through the task's own steps.

The run's resolved recipe (``recipe.toml`` in the run folder) is loaded with the data replaced by
the file to evaluate and the user's ``--set`` overrides (a column that is named differently), and
the steps run in evaluation mode (``ctx.trained_run``, see :class:`nlptasks.RunContext`):

1 setup · 2 load (the file, as the ``test`` split) · 4 preprocess with the run's tokenizer and
labels · 5 the run's trained model · 6 metrics · 7/8 arguments, collator and Trainer (nothing is
trained) · ``nlptasks_evaluate`` · ``nlptasks_errors`` · ``nlptasks_report``.

So a run's own test file gives back exactly the test metrics ``nlptasks run`` printed (with
``--backend torch``, or when no export answers for the run: with every load choice ``auto``, an
export that ``nlptasks export`` measured agreeing and faster scores for the run, as it answers
for it in ``infer`` and ``serve``, and the eval folder's ``metrics.json`` names it as ``run``).  The eval
folder holds ``metrics.json``, ``errors.jsonl`` (every wrong prediction with its file row, gold
and predicted values), ``report.md`` (the metrics and the task's per-class table) and the task's
figures (a confusion matrix).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import shutil
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlptasks.context import RunContext
from nlptasks.engine.io.outputs import atomic_folder, check_new_folder
from nlptasks.engine.io.rundir import write_json, write_text_atomic
from nlptasks.engine.model.classes import resolve as resolve_class
from nlptasks.engine.training.provenance import computed_text, computed_with
from nlptasks.errors import NlptasksError
from nlptasks.host import Host, get_host
from nlptasks.inference.backends import backend_table
from nlptasks.inference.loading import prepare_load
from nlptasks.inference.runs import damaged_files
from nlptasks.inference.streaming import JsonlWriter
from nlptasks.pipeline.assembly import assemble
from nlptasks.pipeline.steps import library_progress_bars, load_recipe
from nlptasks.types import LoadOptions

__all__ = ["EVAL_DIR", "ERRORS", "EvalResult", "evaluate_run"]

EVAL_DIR = "eval"
"""Where a run keeps its evaluations: ``<run>/eval/<name>/``."""
ERRORS = "errors.jsonl"
TEST = "test"


NO_LOSS_KEY = "nlptasks.eval_no_loss"
"""``ctx.state`` key: why the evaluated model gave no loss (an export of a head nlptasks has no loss for)."""


@dataclass
class EvalResult:
    """What :func:`evaluate_run` returns for one data file."""

    source: Path
    output_dir: Path
    metrics: dict[str, Any]
    rows: int
    examples: int
    dropped: dict[str, int] = field(default_factory=dict)
    errors: int | None = None  # None: the task does not list its errors
    seconds: float = 0.0
    precision: str | None = None  # what the Trainer computed in (fp32, bf16, fp16)
    computed: dict[str, Any] = field(default_factory=dict)
    """How the figures were computed (threads, precision, backend, device: ``computed_with``)."""

    @property
    def rows_per_second(self) -> float:
        """Rows of the file scored per second of the whole evaluation (reading, the model's load,
        preprocessing, the forward passes, metrics)."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def evaluate_run(
    run_dir: str | Path,
    files: Iterable[str | Path],
    overrides: Iterable[str] = (),
    output: str | Path | None = None,
    options: LoadOptions | None = None,
    host: Host | None = None,
    progress: bool = False,
) -> list[EvalResult]:
    """Score the complete run ``run_dir`` on each labelled file in ``files`` (in the run's task
    format); write one eval folder per file and return their results.

    :param overrides: ``--set``-style changes to the run's recipe for reading the files
        (``options.text_column=review``); keys that change the model are refused.
    :param output: the eval folder (default: ``<run>/eval/<timestamp>``; with several files, one
        sub-folder per file, named after it).
    :param options: which adapter, backend and precision score the run (``LoadOptions.adapter``,
        ``base_only``, ``backend``, ``precision``: ``auto`` follows the run's end-of-run measurement
        as infer does); the model runs as the Trainer runs it (``train.precision``).
    """
    host = host or get_host()
    run_dir = Path(run_dir)
    # the adapter and --backend against the folder's kind, before any data is read
    # (with every choice auto, a recorded faster export that agrees with the run scores for it, as it answers
    # for it in infer and serve: inference/deployments.py)
    folder, manifest, options = prepare_load(run_dir, options or LoadOptions(), host)
    backend = backend_table(host)[options.backend]
    if backend.eval_module is None:
        raise NlptasksError(
            f"--backend {backend.name}: this backend (plugin {backend.plugin!r}) offers no module "
            "for the Trainer to evaluate",
            hint="Evaluate the run with --backend torch (or auto).",
        )
    paths = [Path(f) for f in files]
    if not paths:
        raise NlptasksError("nothing to evaluate: give --data FILE (labelled data in the run's task format)")
    for f in paths:
        if not f.exists():
            raise NlptasksError(f"--data {f}: no such file or folder")
    overrides = list(overrides)
    _refuse_model_overrides(overrides)
    if options.precision != "auto":  # scored in the precision infer answers in
        given = [o for o in overrides if o.split("=", 1)[0].strip() == "train.precision"]
        if given:
            raise NlptasksError(
                f"--precision {options.precision} and --set {given[0].strip()} both choose the precision",
                hint="Give one of them (--precision takes auto, fp32 or bf16).",
            )
        overrides.append(f"train.precision={options.precision}")
    recipe_file = run_dir / "recipe.toml"
    try:
        raw = tomllib.loads(recipe_file.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise NlptasksError(
            f"{recipe_file}: cannot read the run's recipe: {exc}",
            hint="nlptasks eval needs the recipe.toml that nlptasks run writes into every run.",
        ) from None
    if output is not None:
        base = Path(output)
    else:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        base, n = run_dir / EVAL_DIR / stamp, 2
        while base.exists():
            base, n = run_dir / EVAL_DIR / f"{stamp}-{n}", n + 1
    outputs = [base] if len(paths) == 1 else [base / _folder_name(f, paths) for f in paths]
    inputs: dict[str, Path | None] = {"RUN": run_dir, **{f"--data {f}": f for f in paths}}
    for out in outputs:  # before anything loads: an output that is an input, a file, a full folder
        check_new_folder(out, "--output", inputs, replaces=earlier_eval)
    results = []
    for f, out in zip(paths, outputs, strict=True):
        results.append(_evaluate_file(folder, manifest, backend, raw, f, overrides, out, host, progress))
    return results


def earlier_eval(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier evaluation (its ``metrics.json`` names a run and a source),
    which ``eval -o`` may replace; any other folder that is not empty is refused."""
    try:
        record = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"run", "source", TEST} <= set(record)


def _refuse_model_overrides(overrides: list[str]) -> None:
    """Only what says how to read the data may change: the model and its training are the run's."""
    allowed = ("options.", "data.", "train.eval_batch_size", "train.precision")
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if not key.startswith(allowed):
            raise NlptasksError(
                f"--set {key}: nlptasks eval scores the run as it was trained; only options.*, data.*, "
                "train.eval_batch_size and train.precision may change",
                hint="To change the model or its training, train a new run: nlptasks run RECIPE --set ...",
            )


def _folder_name(path: Path, files: list[Path]) -> str:
    stems = [f.stem for f in files]
    return path.stem if stems.count(path.stem) == 1 else f"{files.index(path) + 1}-{path.stem}"


def _evaluate_file(
    run_dir: Path,
    manifest: dict[str, Any],
    backend: Any,
    raw: dict[str, Any],
    path: Path,
    overrides: list[str],
    out: Path,
    host: Host,
    progress: bool,
) -> EvalResult:
    started = time.perf_counter()
    if path.is_dir() and not any((path / n).is_file() for n in ("state.json", "dataset_dict.json")):
        raise NlptasksError(
            f"--data {path}: is a folder; give a data file in the task's format (.csv, .tsv, .json, .jsonl, "
            ".txt), or a folder Dataset.save_to_disk wrote"
        )
    recipe = json.loads(json.dumps(raw))
    data = recipe.setdefault("data", {})
    for key in ("validation", "test", "hub", "hub_config", "max_train_rows", "max_eval_rows"):
        data.pop(key, None)
    data.update(train=str(path.resolve()), format="auto")
    # The file is read as the recipe's train split: a row limit for it is max_eval_rows.
    overrides = [
        o.replace("data.max_eval_rows", "data.max_train_rows", 1) if o.strip().startswith("data.max_eval_rows") else o
        for o in overrides
        if not o.strip().startswith("data.max_train_rows")
    ]
    loaded = load_recipe(None, overrides, host=host, raw=recipe)
    if loaded.task.name != manifest.get("task"):
        raise NlptasksError(
            f"{run_dir}: the recipe's task {loaded.task.name!r} is not the run's {manifest.get('task')!r}"
        )
    with atomic_folder(
        out, "--output", {"RUN": run_dir, "--data": path}, replaces=earlier_eval
    ) as work:  # renamed to out when complete
        return _score(run_dir, manifest, backend, loaded, path, out, work, host, progress, started)


def _score(
    run_dir: Path,
    manifest: dict[str, Any],
    backend: Any,
    loaded: Any,
    path: Path,
    out: Path,
    work: Path,
    host: Host,
    progress: bool,
    started: float,
) -> EvalResult:
    """Score ``path`` with the run, writing the eval folder ``out`` in ``work`` (its temporary sibling)."""
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=work)
    ctx.trained_run, ctx.trained_manifest = run_dir, manifest
    label_fields = list(loaded.task.label_fields_for(loaded.options))
    assert backend.eval_module is not None

    def trained_model(auto_class: str | type) -> Any:
        with damaged_files(run_dir, manifest):
            return backend.eval_module(run_dir, manifest, auto_class, label_fields)

    ctx.trained_model = trained_model
    from transformers import AutoTokenizer

    if manifest.get("model_module"):  # a plugin's own class: its module registers its config type first
        resolve_class(manifest)

    with damaged_files(run_dir, manifest):
        ctx.tokenizer = AutoTokenizer.from_pretrained(run_dir)
    ctx.labels = list(manifest["labels"]) if manifest.get("labels") is not None else None
    hooks = host.hooks_for(loaded.task)
    with library_progress_bars(progress):
        metrics, errors, trainer, data_out, rows = _steps(ctx, hooks, progress)
        sections = [
            s
            for result in hooks.nlptasks_report(ctx=ctx, trainer=trainer, data=data_out, metrics={TEST: metrics})
            for s in (result or [])
        ]
    dropped = dict(ctx.dropped.get(TEST, {}))
    seconds = time.perf_counter() - started
    result = EvalResult(
        source=path,
        output_dir=out,
        metrics=metrics,
        rows=rows,
        examples=len(data_out[TEST]),
        dropped=dropped,
        errors=None if errors is None else len(errors),
        seconds=seconds,
        precision="bf16" if trainer.args.bf16 else "fp16" if trainer.args.fp16 else "fp32",
        computed=computed_with(trainer, backend.name),
    )
    shutil.rmtree(ctx.checkpoints_dir, ignore_errors=True)  # the Trainer's output folder: nothing is trained
    _write(ctx, run_dir, result, errors, sections)
    return result


def _steps(
    ctx: RunContext, hooks: Any, progress: bool
) -> tuple[dict[str, Any], list[dict[str, Any]] | None, Any, Any, int]:
    from datasets import DatasetDict

    hooks.nlptasks_setup(ctx=ctx)  # 1
    raw = hooks.nlptasks_load_data(ctx=ctx)  # 2: the file, read as the recipe's train split was
    data = DatasetDict({TEST: raw["train"]})
    ctx.sources = {TEST: ctx.sources.get("train", str(ctx.recipe.data.train))}
    rows = len(data[TEST])
    data = hooks.nlptasks_preprocess(ctx=ctx, data=data)  # 4, with the run's tokenizer and labels
    if TEST not in data or len(data[TEST]) == 0:
        reasons = ", ".join(f"{n} {why}" for why, n in ctx.dropped.get(TEST, {}).items()) or "none kept"
        raise NlptasksError(f"{ctx.sources[TEST]}: no example left to evaluate ({rows} rows read; dropped: {reasons})")
    assembly = assemble(ctx, hooks, data, progress)  # 5: the run's trained weights; 6
    trainer = assembly.build(assembly.kwargs)  # 7, 8, 8b: as nlptasks run builds them
    metrics = dict(hooks.nlptasks_evaluate(ctx=ctx, trainer=trainer, data=data, split=TEST))
    metrics.update(ctx.recorded.get(TEST, {}))
    reason = getattr(assembly.model, "loss_reason", None)  # an export whose graph gives no loss
    if reason and not (isinstance(metrics.get("loss"), float) and math.isfinite(metrics["loss"])):
        metrics["loss"] = None
        ctx.state[NO_LOSS_KEY] = reason
    errors = hooks.nlptasks_errors(ctx=ctx, split=TEST, evaluation=ctx.evaluations.get(TEST))
    return metrics, errors, trainer, data, rows


def _write(
    ctx: RunContext, run_dir: Path, result: EvalResult, errors: list[dict[str, Any]] | None, sections: list[str]
) -> None:
    out = ctx.output_dir  # the temporary sibling of result.output_dir
    write_json(
        out / "metrics.json",
        {
            TEST: result.metrics,
            "source": str(result.source),
            "run": str(run_dir),
            "rows": result.rows,
            "examples": result.examples,
            "dropped": result.dropped,
            "errors": result.errors,
            "seconds": round(result.seconds, 1),
            "rows_per_second": round(result.rows_per_second, 1),
            "precision": result.precision,
            "computed": result.computed,
            **({"loss_not_computed": ctx.state[NO_LOSS_KEY]} if NO_LOSS_KEY in ctx.state else {}),
        },
    )
    if errors is not None:
        tmp = out / f".{ERRORS}.tmp"
        with tmp.open("w", encoding="utf-8") as fh:
            JsonlWriter(fh).write(errors)
        tmp.replace(out / ERRORS)
    write_text_atomic(out / "report.md", _report(ctx, run_dir, result, sections))


def _report(ctx: RunContext, run_dir: Path, result: EvalResult, sections: list[str]) -> str:
    lines = [
        f"# Evaluation of {run_dir.name}",
        "",
        f"- run: `{run_dir}`",
        f"- data: `{result.source}` ({result.rows} rows, {result.examples} examples scored)",
    ]
    lines.append(f"- computed with: {computed_text(result.computed)}")
    if NO_LOSS_KEY in ctx.state:
        lines.append(f"- loss: not computed: {ctx.state[NO_LOSS_KEY]}")
    if result.dropped:
        lines.append("- dropped: " + ", ".join(f"{n} {why}" for why, n in result.dropped.items()))
    if result.errors is not None:
        lines.append(f"- wrong predictions: {result.errors} (`{ERRORS}`)")
    lines += ["", "| metric | value |", "|---|---|"]
    timings = {"runtime", "samples_per_second", "steps_per_second", "epoch"}
    for key, value in result.metrics.items():
        if "/" not in key and key not in timings and isinstance(value, int | float) and not isinstance(value, bool):
            lines.append(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |")
    return "\n\n".join(["\n".join(lines), *sections]) + "\n"
