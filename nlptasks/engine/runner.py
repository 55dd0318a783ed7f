"""``nlptasks run``: the ten steps in order, and the run directory they leave behind.

A run directory ``<output.dir>/<task>/<run_name>/`` holds::

    model.safetensors, config.json      the trained model (loads with plain transformers)
    tokenizer.json, tokenizer_config.json
    labels.json                         the label list (index = class id), when the task has classes
    recipe.toml                         the resolved recipe (every default filled in)
    nlptasks-run.json                   written at the start: the resolved recipe and its hash (for --resume)
    checkpoints/                        while training (removed at the end unless output.keep_checkpoints)
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
import logging
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
                from nlptasks.engine.resume import RUN_STATE

                incomplete = (path / RUN_STATE).exists() and not (path / COMPLETE).exists()
                raise NlptasksError(
                    f"output.run_name: {path} already exists" + (" (an incomplete run)" if incomplete else ""),
                    hint=("Continue it: nlptasks run RECIPE --resume; or " if incomplete else "")
                    + "pick another name (--set output.run_name=NAME) or replace it (--set output.overwrite=true).",
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
    resume: bool | str | Path = False,
) -> RunResult:
    """Run a recipe through the ten steps and save the run; return its directory and metrics.

    :param resume: continue an incomplete run of this recipe from its last complete checkpoint
        (``nlptasks run --resume``): ``True`` for the latest one under ``<output.dir>/<task>``,
        or the run folder.  A run whose recipe differs is refused, naming the keys that differ.
    """
    host = host or get_host()
    loaded = recipe if isinstance(recipe, LoadedRecipe) else load_recipe(recipe, overrides, host=host)
    from nlptasks.engine import distributed
    from nlptasks.engine.adapters import check_machine

    check_machine(loaded.recipe, str(loaded.path or "<recipe>"))  # before any model is loaded
    model = loaded.recipe.model
    if model.name_or_path:  # safety switches, before the tokenizer or model load anything
        from nlptasks.engine.modeling import check_weight_files, warn_remote_code


        check_weight_files(model.name_or_path, model.allow_pickle)
        warn_remote_code(logging.getLogger("nlptasks"), model.name_or_path, model.trust_remote_code)
    started = time.perf_counter()
    resuming = resume is not False and resume is not None

    def pick_run_dir() -> tuple[Path, Path | None]:
        if not resuming:
            return run_dir_for(loaded), None
        from nlptasks.engine.resume import find_run, latest_checkpoint

        given = None if resume is True else Path(resume)
        found = find_run(loaded, _runs_base(loaded), given)
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
        ctx.log.info("distributed: %d processes (%s); rank 0 writes the run", distributed.world_size(), distributed.backend())

    try:
        with _library_progress_bars(progress):
            metrics, trainer, data = _steps(ctx, hooks, loaded, progress)
            seconds = time.perf_counter() - started
            save_run(ctx, host, trainer, metrics, seconds, loaded, hooks, data)
    except OSError as exc:
        raise write_error(exc, output_dir) from None
    except Exception as exc:
        io_error = _wrapped_io_error(exc, output_dir)
        if io_error is None:
            raise
        raise write_error(io_error, output_dir) from None
    return RunResult(output_dir=output_dir, metrics=metrics, seconds=seconds)


def _runs_base(loaded: LoadedRecipe) -> Path:
    base = Path(loaded.recipe.output.dir)
    if not base.is_absolute():
        base = Path.cwd() / base
    return base / loaded.task.name


# How libraries that write in native code report a failed write: safetensors ("I/O error: No space
# left on device (os error 28)") and torch.save ("PytorchStreamWriter failed writing file ...").
_IO_MESSAGES = ("I/O error", "failed writing file", "No space left on device", "File too large")


def _wrapped_io_error(exc: Exception, output_dir: Path) -> OSError | None:
    """An ``OSError`` for a write failure a library reported as another exception, naming the
    file being written (the newest file under the run folder), or ``None``."""
    import errno
    import re

    text = str(exc)
    if not any(m in text for m in _IO_MESSAGES):
        return None
    code = re.search(r"os error (\d+)", text)
    number = int(code.group(1)) if code else errno.EIO
    newest = None
    if output_dir.is_dir():
        # the file being written, or the folder a library removed its partial file from
        def mtime(p: Path) -> int:
            try:
                return p.stat().st_mtime_ns
            except OSError:
                return -1

        newest = max(output_dir.rglob("*"), key=mtime, default=None)
    import os

    reason = os.strerror(number) if code else text.strip().splitlines()[0]
    return OSError(number, f"{reason} (a write failed here)", str(newest or output_dir))


def write_error(exc: OSError, output_dir: Path) -> NlptasksError:
    """An ``OSError`` met while a run reads and writes its folder, as one line naming the path."""
    import errno

    path = exc.filename or output_dir
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = "The disk (or a size limit) is full: free space, or write the run elsewhere with --set output.dir=DIR."
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        hint = "Write the run to a folder you can write to: --set output.dir=DIR."
    else:
        hint = "Check the path; runs go to <output.dir>/<task>/<run_name> (--set output.dir=DIR)."
    return NlptasksError(f"{path}: {reason} (run folder {output_dir}; it is left incomplete)", hint=hint)


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
        from nlptasks.engine.resume import write_run_state

        write_run_state(output_dir, loaded)  # the recipe hash that --resume checks
        write_text_atomic(
            output_dir / "recipe.toml",
            dump_toml(loaded.resolved(), header=f"Resolved recipe of this run (from {loaded.path}).\nRe-run: nlptasks run recipe.toml"),
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

    from nlptasks.engine.ordering import order_evaluation
    from nlptasks.engine.training import guard_trainer, training_kwargs, use_readable_logs

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
        guard_trainer(trainer, ctx)  # checkpoints every N steps, NaN stop, --resume
        order_evaluation(trainer, ctx)  # length-sorted evaluation batches, results in data order
        return trainer

    metrics, trainer = train_with_oom_fallback(  # 9
        ctx, build, lambda trainer: hooks.nlptasks_train(ctx=ctx, trainer=trainer, data=data), kwargs, world_size()
    )
    return metrics, trainer, data


def save_run(
    ctx: RunContext, host: Host, trainer: Any, metrics: dict[str, Any], seconds: float, loaded: LoadedRecipe,
    hooks: Any = None, data: Any = None,
) -> None:
    """Write the run's files, then ``COMPLETE`` last: a folder without it is never served.

    With ``hooks`` (and the tokenized ``data``) the report is written too (:func:`write_report`).
    Intermediate checkpoints are removed only after ``COMPLETE`` exists, so an interrupted save
    can always be resumed (``nlptasks run --resume``).  In a distributed run every rank takes part
    in saving the model; rank 0 writes the rest.
    """
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
    if hooks is not None:
        write_report(ctx, hooks, trainer, data, loaded)
    mark_complete(out)
    if not loaded.recipe.output.keep_checkpoints and ctx.checkpoints_dir.exists():
        shutil.rmtree(ctx.checkpoints_dir, ignore_errors=True)
    barrier()


def mark_complete(run_dir: Path) -> None:
    """Write the ``COMPLETE`` marker: call it after every other file of the run is written."""
    write_text_atomic(run_dir / COMPLETE, _dt.datetime.now().isoformat(timespec="seconds") + "\n")


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
    write_text_atomic(out / report.CARD, card)


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


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file and a rename: readers see the old file or the new
    one, never half of one."""
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, value: Any) -> None:
    write_text_atomic(path, json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The manifest of a complete run; an incomplete or foreign folder is an error saying what
    to do (every consumer of runs reads them through here: infer, export, add-adapter, load)."""
    path = run_dir / MANIFEST
    if not (run_dir / COMPLETE).exists():
        from nlptasks.engine.resume import RUN_STATE, resume_command

        if (run_dir / RUN_STATE).exists():
            raise NlptasksError(
                f"{run_dir}: an incomplete run (training stopped before it finished: no {COMPLETE} marker); "
                "it is not used",
                hint=f"Finish it: {resume_command(run_dir)}   (or use a complete run)",
            )
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
