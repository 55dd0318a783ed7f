"""``nlptasks run``: the ten steps in order, and the run directory they leave behind.

A run directory ``<output.dir>/<task>/<run_name>/`` holds::

    model.safetensors, config.json      the trained model (loads with plain transformers)
    tokenizer.json, tokenizer_config.json
    labels.json                         the label list (index = class id), when the task has classes
    recipe.toml                         the resolved recipe (every default filled in)
    metrics.json                        train/validation/test metrics, dropped-row counts, wall time
                                        (seconds) and peak memory (resources)
    nlptasks.json                       the manifest: task, labels, tokenizer settings, data sources
                                        and row counts, recipe sha256, plugins and versions, and the
                                        task's inference settings (template, sub-word policy, adapters)
    log_history.json                    the Trainer's log entries (loss, eval metrics by step)
    README.md                           the model card (see nlptasks.engine.report)
    training_curves.png                 loss and the best-checkpoint metric by step
    COMPLETE                            written last: the run finished

With a ``[peft]`` table the model files are the adapter instead (``adapter_config.json``,
``adapter_model.safetensors``), with the frozen base under ``base/`` and a few inputs for
``nlptasks export --merge`` in ``peft_check.json`` (see :mod:`nlptasks.engine.adapters`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import platform
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlptasks.context import RunContext
from nlptasks.errors import NlptasksError
from nlptasks.plugins import Host, get_host
from nlptasks.recipe import LoadedRecipe, dump_toml, load_recipe

MANIFEST = "nlptasks.json"
COMPLETE = "COMPLETE"


@dataclass
class RunResult:
    output_dir: Path
    metrics: dict[str, Any]
    seconds: float


def run_dir_for(loaded: LoadedRecipe) -> Path:
    out = loaded.recipe.output
    base = Path(out.dir)
    if not base.is_absolute():
        base = Path.cwd() / base
    task_dir = base / loaded.task.name
    if out.run_name:
        path = task_dir / out.run_name
        if path.exists():
            if not out.overwrite:
                raise NlptasksError(
                    f"output.run_name: {path} already exists",
                    hint="Pick another name (--set output.run_name=NAME) or replace it (--set output.overwrite=true).",
                )
            shutil.rmtree(path)
        return path
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = task_dir / stamp, 2
    while path.exists():
        path, n = task_dir / f"{stamp}-{n}", n + 1
    return path


def run(
    recipe: str | Path | LoadedRecipe,
    overrides: Iterable[str] = (),
    host: Host | None = None,
    progress: bool = True,
) -> RunResult:
    """Run a recipe through the ten steps and save the run; return its directory and metrics."""
    host = host or get_host()
    loaded = recipe if isinstance(recipe, LoadedRecipe) else load_recipe(recipe, overrides, host=host)
    from nlptasks.engine import distributed
    from nlptasks.engine.adapters import check_machine

    check_machine(loaded.recipe, str(loaded.path or "<recipe>"))  # before any model is loaded
    started = time.perf_counter()
    output_dir = distributed.on_main(lambda: run_dir_for(loaded))  # one name for every rank
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=output_dir)
    hooks = host.hooks_for(loaded.task)
    if not distributed.is_main():
        import logging

        logging.getLogger("nlptasks").setLevel(logging.WARNING)  # rank 0 logs for the run
    ctx.log.info("run %s: task %r → %s", loaded.path or "<recipe>", loaded.task.name, output_dir)
    if distributed.world_size() > 1:
        ctx.manifest["distributed"] = {"world_size": distributed.world_size(), "backend": distributed.backend()}
        ctx.log.info("distributed: %d processes (%s); rank 0 writes the run", distributed.world_size(), distributed.backend())

    with _library_progress_bars(progress):
        metrics, trainer, data = _steps(ctx, hooks, loaded, progress)
        seconds = time.perf_counter() - started
        save_run(ctx, host, trainer, metrics, seconds, loaded, hooks, data)
    return RunResult(output_dir=output_dir, metrics=metrics, seconds=seconds)


@contextlib.contextmanager
def _library_progress_bars(enabled: bool) -> Iterator[None]:
    """Show or hide the library bars (datasets' tokenizing, transformers' saving) for the run."""
    import datasets
    from transformers.utils import logging as hf_logging

    switches = [
        (datasets.is_progress_bar_enabled(), datasets.enable_progress_bars, datasets.disable_progress_bars),
        (hf_logging.is_progress_bar_enabled(), hf_logging.enable_progress_bar, hf_logging.disable_progress_bar),
    ]
    for _, enable, disable in switches:
        (enable if enabled else disable)()
    try:
        yield
    finally:
        for was, enable, disable in switches:
            (enable if was else disable)()


def _steps(ctx: RunContext, hooks: Any, loaded: LoadedRecipe, progress: bool) -> tuple[dict[str, Any], Any, Any]:
    """Steps 1 to 9; returns the metrics, the trainer (whose model is saved) and the tokenized data."""
    from nlptasks.engine.distributed import is_main, world_size

    output_dir = ctx.output_dir
    hooks.nlptasks_setup(ctx=ctx)  # 1
    if is_main():
        (output_dir / "recipe.toml").write_text(
            dump_toml(loaded.resolved(), header=f"Resolved recipe of this run (from {loaded.path}).\nRe-run: nlptasks run recipe.toml"),
            encoding="utf-8",
        )
    raw = hooks.nlptasks_load_data(ctx=ctx)  # 2
    data = hooks.nlptasks_split(ctx=ctx, data=raw)  # 3
    ctx.manifest["data"] = {"sources": dict(ctx.sources), "rows": {split: len(ds) for split, ds in data.items()}}
    data = hooks.nlptasks_preprocess(ctx=ctx, data=data)  # 4
    ctx.manifest["data"]["examples"] = {split: len(ds) for split, ds in data.items()}
    if "train" not in data or len(data["train"]) == 0:
        raise NlptasksError(f"no training rows left after preprocessing ({ctx.sources.get('train', 'train')})")
    model = hooks.nlptasks_build_model(ctx=ctx)  # 5
    from nlptasks.engine.optimize import prepare_model, train_with_oom_fallback

    model = prepare_model(ctx, model)  # [optimize]: attention, freezing
    if loaded.recipe.peft is not None:  # the adapter goes on the model step 5 built
        from nlptasks.engine.adapters import apply_peft

        model = apply_peft(ctx, model, data)
    compute_metrics = hooks.nlptasks_metrics(ctx=ctx)  # 6

    from nlptasks.engine.training import training_kwargs, use_readable_logs

    has_validation = "validation" in data and len(data["validation"]) > 0
    kwargs = training_kwargs(ctx, has_validation, compute_metrics is not None, progress=progress)
    collators: list[Any] = []

    def build(kwargs: dict[str, Any]) -> Any:  # steps 7, 8 and 8b (7 and 8b again after an OOM fallback)
        args = hooks.nlptasks_training_arguments(ctx=ctx, kwargs=dict(kwargs))  # 7
        if not collators:
            collators.append(hooks.nlptasks_data_collator(ctx=ctx))  # 8
        trainer = hooks.nlptasks_trainer(  # 8b
            ctx=ctx, model=model, args=args, data=data, data_collator=collators[0], compute_metrics=compute_metrics
        )
        use_readable_logs(trainer, ctx, progress)
        return trainer

    metrics, trainer = train_with_oom_fallback(  # 9
        ctx, build, lambda trainer: hooks.nlptasks_train(ctx=ctx, trainer=trainer, data=data), kwargs, world_size()
    )
    return metrics, trainer, data


def save_run(
    ctx: RunContext, host: Host, trainer: Any, metrics: dict[str, Any], seconds: float, loaded: LoadedRecipe,
    hooks: Any = None, data: Any = None,
) -> None:
    """Save the model and the run's files; with ``hooks`` (and the tokenized ``data``) also the
    report (:func:`write_report`); ``COMPLETE`` last."""
    from nlptasks.engine.distributed import barrier, is_main

    out = ctx.output_dir
    trainer.save_model(str(out))  # model (safetensors) and, through processing_class, the tokenizer
    if not is_main():  # every rank takes part in saving the model (FSDP, DeepSpeed); rank 0 writes the rest
        barrier()
        return
    if ctx.tokenizer is not None:
        ctx.tokenizer.save_pretrained(str(out))
    if ctx.labels is not None:
        write_json(out / "labels.json", ctx.labels)
    from nlptasks.engine.report import LOG_HISTORY, peak_memory

    full_metrics = {**metrics, "dropped": ctx.dropped, "seconds": round(seconds, 1), "resources": peak_memory()}
    write_json(out / "metrics.json", full_metrics)
    write_json(out / LOG_HISTORY, list(getattr(getattr(trainer, "state", None), "log_history", None) or []))
    write_json(out / MANIFEST, manifest_for(ctx, host, loaded))
    if not loaded.recipe.output.keep_checkpoints and ctx.checkpoints_dir.exists():
        shutil.rmtree(ctx.checkpoints_dir)
    if hooks is not None:
        write_report(ctx, hooks, trainer, data, loaded)
    (out / COMPLETE).write_text(_dt.datetime.now().isoformat(timespec="seconds") + "\n", encoding="utf-8")
    barrier()


def write_report(ctx: RunContext, hooks: Any, trainer: Any, data: Any, loaded: LoadedRecipe) -> None:
    """The model card ``README.md`` and ``training_curves.png``, with the task's own sections from
    the ``nlptasks_report`` hook (see :mod:`nlptasks.engine.report`)."""
    from nlptasks.engine import report

    out = ctx.output_dir
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    history = json.loads((out / report.LOG_HISTORY).read_text(encoding="utf-8"))
    curves = report.write_curves(history, out / report.CURVES, ctx.task.best_metric_for(ctx.options))
    from nlptasks.engine.distributed import world_size

    sections = []
    if world_size() == 1:  # a hook may call trainer.predict, a collective step that rank 0 cannot take alone
        sections = [s for result in hooks.nlptasks_report(ctx=ctx, trainer=trainer, data=data, metrics=metrics)
                    for s in (result or [])]
    else:
        ctx.log.info("distributed run: the model card leaves out the task's own sections (nlptasks_report)")
    card = report.model_card(out, manifest, metrics, (out / "recipe.toml").read_text(encoding="utf-8"),
                             loaded.recipe.description, sections, curves)
    (out / report.CARD).write_text(card, encoding="utf-8")


def manifest_for(ctx: RunContext, host: Host, loaded: LoadedRecipe) -> dict[str, Any]:
    import importlib.metadata as md

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    plugins = []
    for info in host.infos():
        if info.tasks and ctx.task.name not in info.tasks:
            continue  # other task plugins took no part
        plugins.append({"name": info.name, "dist": info.dist, "version": info.version})
    from nlptasks.engine.report import recipe_sha256, tokenizer_settings

    return {
        "task": ctx.task.name,
        "plugin": ctx.task.plugin,
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "recipe_sha256": recipe_sha256(loaded.resolved()),
        "labels": ctx.labels,
        "max_length": ctx.recipe.model.max_length,
        "tokenizer": tokenizer_settings(ctx.tokenizer),
        "base_model": ctx.recipe.model.name_or_path or f"scratch:{ctx.recipe.model.scratch.architecture}",  # type: ignore[union-attr]
        "options": loaded.options.model_dump(mode="json"),
        "plugins": plugins,
        "versions": {
            "python": platform.python_version(),
            **{name: version(name) for name in ("nlptasks", "transformers", "torch", "datasets", "tokenizers", "pluggy", "peft")},
        },
        **ctx.manifest,
    }


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not (run_dir / COMPLETE).exists():
        raise NlptasksError(
            f"{run_dir}: not a complete nlptasks run (no {COMPLETE} marker)",
            hint="Point --model at a folder made by `nlptasks run`, or run a recipe first.",
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise NlptasksError(f"{path}: cannot read the run manifest: {exc}") from None


def latest_run(task: str, runs_dir: Path | None = None) -> Path | None:
    """The most recently completed run of ``task`` under ``runs_dir`` (default ``./runs``)."""
    base = (runs_dir or Path("runs")) / task
    if not base.is_dir():
        return None
    complete = [p.parent for p in base.glob(f"*/{COMPLETE}")]
    if not complete:
        return None
    return max(complete, key=lambda p: ((p / COMPLETE).stat().st_mtime, p.name))


def load_predictor(
    run_dir: Path, host: Host | None = None, adapter: str | None = None, base_only: bool = False
) -> Any:
    """Step 10: the predictor of a complete run, from the plugin that owns its task.

    :param adapter: for an adapter run, the adapter to use (``nlptasks infer --adapter NAME``).
    :param base_only: for an adapter run, the frozen base alone (``--base-only``).
    """
    from nlptasks.engine.adapters import choose

    host = host or get_host()
    manifest = choose(read_manifest(run_dir), run_dir, adapter, base_only)
    task = host.task(manifest.get("task", "?"))
    return host.hooks_for(task).nlptasks_load_predictor(run_dir=run_dir, manifest=manifest)
