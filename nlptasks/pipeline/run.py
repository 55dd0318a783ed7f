"""``nlptasks run``: the ten steps in order, and the run folder they leave behind
(:mod:`nlptasks.engine.io.rundir` lists its files)."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlptasks.context import RunContext
from nlptasks.engine.io.rundir import (
    MANIFEST,
    mark_complete,
    run_dir_for,
    runs_base,
    wrapped_io_error,
    write_error,
    write_json,
    write_text_atomic,
)
from nlptasks.engine.training.tracking import start_tracking, tracked
from nlptasks.errors import NlptasksError
from nlptasks.host import Host, get_host
from nlptasks.pipeline.steps import library_progress_bars, load_recipe, steps_1_to_4
from nlptasks.recipe import LoadedRecipe, dump_toml
from nlptasks.types import Usage

__all__ = ["RunResult", "run", "save_run"]


@dataclass
class RunResult:
    """What :func:`run` returns: the run folder, its metrics by split, the wall time, and the
    manifest (``nlptasks.json``)."""

    output_dir: Path
    metrics: dict[str, Any]
    seconds: float
    manifest: dict[str, Any] = field(default_factory=dict)
    usage: Usage | None = None

    def try_command(self, shown: str | None = None) -> str:
        """The ``nlptasks infer`` command that works for this run (the task's example input), with
        the run folder written as ``shown``."""
        from nlptasks.engine.reports.card import infer_command

        return infer_command(shown or str(self.output_dir), self.usage or Usage())


def run(
    recipe: str | Path | LoadedRecipe,
    overrides: Iterable[str] = (),
    host: Host | None = None,
    progress: bool = True,
    resume: bool | str | Path = False,
    run_dir: str | Path | None = None,
) -> RunResult:
    """Run a recipe through the ten steps and save the run; return its directory and metrics.

    :param resume: continue an incomplete run of this recipe from its last complete checkpoint
        (``nlptasks run --resume``): ``True`` for the latest one under ``<output.dir>/<task>``,
        or the run folder.  A run whose recipe differs is refused, naming the keys that differ.
    :param run_dir: write the run to this folder (which must not exist yet) instead of
        ``<output.dir>/<task>/<run_name>`` (``nlptasks tune`` puts each trial in its study folder).
    """
    host = host or get_host()
    loaded = recipe if isinstance(recipe, LoadedRecipe) else load_recipe(recipe, overrides, host=host)
    from nlptasks.engine.system import distributed
    from nlptasks.engine.system.machine import check_machine

    check_machine(loaded.recipe, str(loaded.path or "<recipe>"))  # before any model is loaded
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker (its own session): it ends with its
        from nlptasks.engine.system.processes import die_with_parent  # agent, not train on alone

        die_with_parent()
    from nlptasks.engine.training.preflight import check_preflight

    check_preflight(loaded)  # what validate checks beyond the recipe: libraries, config.json, memory
    model = loaded.recipe.model
    if model.name_or_path:  # safety switches, before the tokenizer or model load anything
        from nlptasks.engine.model.modeling import check_weight_files, warn_remote_code

        check_weight_files(model.name_or_path, model.allow_pickle)
        warn_remote_code(logging.getLogger("nlptasks"), model.name_or_path, model.trust_remote_code)
    started = time.perf_counter()
    resuming = resume is not False and resume is not None

    def pick_run_dir() -> tuple[Path, Path | None]:
        if run_dir is not None and not resuming:
            if Path(run_dir).exists():
                raise NlptasksError(f"{run_dir} already exists: a new run needs a new folder")
            return Path(run_dir), None
        if not resuming:
            return run_dir_for(loaded), None
        from nlptasks.engine.training.resume import find_run, latest_checkpoint

        given = None if resume is True else Path(resume)
        found = find_run(loaded, runs_base(loaded), given)
        return found, latest_checkpoint(found / "checkpoints")

    output_dir, resume_from = distributed.on_main(pick_run_dir)  # one folder for every rank
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=output_dir)
    ctx.resume_from = resume_from
    hooks = host.hooks_for(loaded.task)
    if not distributed.is_main():
        logging.getLogger("nlptasks").setLevel(logging.WARNING)  # rank 0 logs for the run
    if resuming:
        if resume_from is not None:
            ctx.log.info("resume %s from %s", output_dir, resume_from.name)
        else:
            ctx.log.info("resume %s: no complete checkpoint there, so training starts over in it", output_dir)
    else:
        ctx.log.info("run %s: task %r → %s", loaded.path or "<recipe>", loaded.task.name, output_dir)
    if distributed.world_size() > 1:
        ctx.manifest["distributed"] = {"world_size": distributed.world_size(), "backend": distributed.backend()}
        if loaded.recipe.train.zero is not None or loaded.recipe.train.extra.get("deepspeed"):
            ctx.manifest["distributed"]["deepspeed_zero"] = loaded.recipe.train.zero or "train.extra.deepspeed"
        ctx.log.info(
            "distributed: %d processes (%s); rank 0 writes the run", distributed.world_size(), distributed.backend()
        )

    fresh = not resuming and not output_dir.exists()  # a refused run leaves no folder it made
    try:
        with library_progress_bars(progress), tracked(ctx):  # an MLflow run ends as this run does
            metrics, trainer, data = _steps(ctx, hooks, loaded, progress)
            seconds = time.perf_counter() - started
            manifest = save_run(ctx, host, trainer, metrics, seconds, loaded, hooks, data)
    except OSError as exc:
        _discard_if_refused(ctx, output_dir, fresh)
        raise write_error(exc, output_dir) from None
    except BaseException as exc:
        _discard_if_refused(ctx, output_dir, fresh)
        if not isinstance(exc, Exception):
            raise
        io_error = wrapped_io_error(exc, output_dir)
        if io_error is None:
            raise
        raise write_error(io_error, output_dir) from None
    if distributed.world_size() == 1:  # in a distributed run loads would meet the process group
        with library_progress_bars(False):  # two loads of the saved model: not worth a bar each
            measure_inference(ctx.log, output_dir)
    elif distributed.is_main():
        ctx.log.info("distributed run: bf16 inference not measured; loads answer in the run's training precision")
    return RunResult(
        output_dir=output_dir,
        metrics=metrics,
        seconds=seconds,
        manifest=manifest,
        usage=loaded.task.usage_for(manifest),
    )


_TRAINING = "nlptasks.training_started"


def measure_inference(log: logging.Logger, run_dir: Path) -> None:
    """The run's own weights in bf16 against fp32, where this CPU has bf16 to choose
    (:func:`nlptasks.pipeline.measuring.measure_precisions`), logged; a failure is a warning, never
    the run's: the run is complete, and unmeasured it answers as before."""
    from nlptasks.inference.deployments import refusal, speedups
    from nlptasks.pipeline.measuring import measure_precisions

    try:
        entry = measure_precisions(run_dir)
    except Exception as exc:  # noqa: BLE001 - the run is saved; only the choice of precision is lost
        log.warning("%s: bf16 inference not measured (%s); loads answer in the run's training precision", run_dir, exc)
        return
    if isinstance(entry, str):
        log.info("inference in bf16 on this CPU %s; loads answer in the run's training precision", entry)
        return
    if entry is None:
        return
    batched, single = speedups(entry) or (0.0, 0.0)
    why = refusal(entry)
    log.info(
        "inference in bf16 on this CPU: %.2fx fp32 rows/s batched, %.2fx one at a time, on %d %s rows: %s; %s",
        batched,
        single,
        entry["rows"],
        entry["split"],
        entry["why"],
        "loads of the run answer in bf16 (--precision fp32 for fp32)"
        if why is None
        else f"loads answer in fp32: {why}",
    )


def _discard_if_refused(ctx: RunContext, output_dir: Path, fresh: bool) -> None:
    """Remove the run folder this run made when it stopped before training began (a refused
    recipe or data set leaves no incomplete run behind)."""
    from nlptasks.engine.system.distributed import is_main

    if fresh and not ctx.state.get(_TRAINING) and is_main():
        shutil.rmtree(output_dir, ignore_errors=True)


def _steps(ctx: RunContext, hooks: Any, loaded: LoadedRecipe, progress: bool) -> tuple[dict[str, Any], Any, Any]:
    """Steps 1 to 9; returns the metrics, the trainer (whose model is saved) and the tokenized data."""
    from nlptasks.engine.system.distributed import is_main, world_size

    def write_state() -> None:
        if is_main():
            from nlptasks.engine.training.resume import write_run_state

            write_run_state(ctx.output_dir, loaded)  # the recipe hash that --resume checks
            write_text_atomic(
                ctx.output_dir / "recipe.toml",
                dump_toml(
                    loaded.resolved(),
                    header=f"Resolved recipe of this run (from {loaded.path}).\nRe-run: nlptasks run recipe.toml",
                ),
            )

    data = steps_1_to_4(ctx, hooks, after_setup=write_state)  # 1-4
    if "train" not in data or len(data["train"]) == 0:
        raise NlptasksError(f"no training rows left after preprocessing ({ctx.sources.get('train', 'train')})")
    from nlptasks.engine.training.optimize import train_with_oom_fallback
    from nlptasks.engine.training.throughput import throughput_figures, whole_run_loss
    from nlptasks.pipeline.assembly import assemble

    assembly = assemble(ctx, hooks, data, progress)  # 5-6 now, 7-8b in assembly.build
    start_tracking(ctx)  # train.report_to = ["mlflow"]: its run starts (or refuses) before training does
    ctx.state[_TRAINING] = True  # from here on, a failed run keeps its folder (checkpoints, --resume)
    metrics, trainer = train_with_oom_fallback(  # 9
        ctx,
        assembly.build,
        lambda trainer: hooks.nlptasks_train(ctx=ctx, trainer=trainer, data=data),
        assembly.kwargs,
        world_size(),
    )
    if getattr(getattr(trainer, "state", None), "global_step", 1) == 0:
        raise NlptasksError(
            f"train: no optimizer step was taken ({len(data['train'])} training examples, batch "
            f"{trainer.args.per_device_train_batch_size} x {trainer.args.gradient_accumulation_steps}, "
            f"{trainer.args.num_train_epochs:g} epochs, max_steps {trainer.args.max_steps}): the model is as it was "
            f"built, so the run {ctx.output_dir} is left incomplete",
            hint="Train for at least one step: check train.epochs, train.max_steps and the batch size against the data.",
        )
    train = metrics.setdefault("train", {})
    precision = ctx.manifest.get("precision", "fp32")
    counts = assembly.counted[-1]
    train.update(throughput_figures(counts, train.get("runtime"), trainer.model, precision))
    train.update(whole_run_loss(counts, trainer.state.global_step))  # a resumed run's too
    for split, figures in ctx.recorded.items():  # what the task measured outside evaluation
        if split == "train" or split in metrics:
            metrics.setdefault(split, {}).update(figures)
    return metrics, trainer, data


def save_run(
    ctx: RunContext,
    host: Host,
    trainer: Any,
    metrics: dict[str, Any],
    seconds: float,
    loaded: LoadedRecipe,
    hooks: Any = None,
    data: Any = None,
) -> dict[str, Any]:
    """Write the run's files, then ``COMPLETE`` last: a folder without it is never served.
    Returns the manifest.

    With ``hooks`` (and the tokenized ``data``) the report is written too (:func:`write_report`).
    Intermediate checkpoints are removed only after ``COMPLETE`` exists, so an interrupted save
    can always be resumed (``nlptasks run --resume``).  In a distributed run every rank takes part
    in saving the model; rank 0 writes the rest.
    """
    from nlptasks.engine.system.distributed import barrier, is_main

    out = ctx.output_dir
    trainer.save_model(str(out))  # model (safetensors) and, through processing_class, the tokenizer
    manifest = manifest_for(ctx, host, loaded)
    if not is_main():  # every rank takes part in saving the model (FSDP, DeepSpeed); rank 0 writes the rest
        barrier()
        return manifest
    weights = [*out.glob("*.safetensors"), *out.glob("*.safetensors.index.json"), *out.glob("pytorch_model*.bin")]
    if not weights:  # e.g. ZeRO-3 or FSDP shards that were not gathered: never a COMPLETE run without a model
        raise NlptasksError(
            f"{out}: the trainer saved no model weights (no *.safetensors); the run is not marked complete",
            hint="With DeepSpeed ZeRO-3 or FSDP the weights must be gathered on save "
            "(docs/optimize.md#deepspeed-zero); resume from the last checkpoint with --resume.",
        )
    if ctx.tokenizer is not None:
        ctx.tokenizer.save_pretrained(str(out))
    if ctx.labels is not None:
        write_json(out / "labels.json", ctx.labels)
    from nlptasks.engine.reports.card import LOG_HISTORY, peak_memory
    from nlptasks.engine.training.provenance import computed_with

    full_metrics = {
        **metrics,
        "dropped": ctx.dropped,
        "seconds": round(seconds, 1),
        "resources": peak_memory(),
        "computed": computed_with(trainer),  # the validation and test figures: threads, precision, device
    }
    write_json(out / "metrics.json", full_metrics)
    write_json(out / LOG_HISTORY, list(getattr(getattr(trainer, "state", None), "log_history", None) or []))
    write_json(out / MANIFEST, manifest)
    if hooks is not None:
        write_report(ctx, hooks, trainer, data, loaded)
    mark_complete(out)
    if not loaded.recipe.output.keep_checkpoints and ctx.checkpoints_dir.exists():
        shutil.rmtree(ctx.checkpoints_dir, ignore_errors=True)
    barrier()
    return manifest


def write_report(ctx: RunContext, hooks: Any, trainer: Any, data: Any, loaded: LoadedRecipe) -> None:
    """The model card ``README.md`` and ``training_curves.png``, with the task's own sections from
    the ``nlptasks_report`` hook and its :class:`~nlptasks.types.Usage` (see
    :mod:`nlptasks.engine.reports.card`)."""
    from nlptasks.engine.reports import card as report
    from nlptasks.engine.reports.figures import write_curves
    from nlptasks.engine.system.distributed import world_size

    out = ctx.output_dir
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    history = json.loads((out / report.LOG_HISTORY).read_text(encoding="utf-8"))
    curves = write_curves(history, out / report.CURVES, ctx.task.best_metric_for(ctx.options))
    sections = []
    if world_size() == 1:  # a hook may call trainer.predict, a collective step that rank 0 cannot take alone
        sections = [
            s
            for result in hooks.nlptasks_report(ctx=ctx, trainer=trainer, data=data, metrics=metrics)
            for s in (result or [])
        ]
    else:
        ctx.log.info("distributed run: the model card leaves out the task's own sections (nlptasks_report)")
    card = report.model_card(
        out,
        manifest,
        metrics,
        (out / "recipe.toml").read_text(encoding="utf-8"),
        loaded.recipe.description,
        sections,
        curves,
        ctx.task.usage_for(manifest),
    )
    write_text_atomic(out / report.CARD, card)


def manifest_for(ctx: RunContext, host: Host, loaded: LoadedRecipe) -> dict[str, Any]:
    """The run's ``nlptasks.json``: the engine's entries, then the task's (``ctx.manifest``)."""
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
    from nlptasks.engine.reports.card import tokenizer_settings

    return {
        "task": ctx.task.name,
        "plugin": ctx.task.plugin,
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "recipe_sha256": loaded.sha256(),
        "labels": ctx.labels,
        "max_length": ctx.recipe.model.max_length,
        "tokenizer": tokenizer_settings(ctx.tokenizer),
        "base_model": ctx.recipe.model.name_or_path or f"scratch:{ctx.recipe.model.scratch.architecture}",  # type: ignore[union-attr]
        "options": loaded.options.model_dump(mode="json"),
        "plugins": plugins,
        "versions": {
            "python": platform.python_version(),
            **{
                name: version(name)
                for name in ("nlptasks", "transformers", "torch", "datasets", "tokenizers", "pluggy", "peft")
            },
        },
        **ctx.manifest,
    }
