"""The run folder: where a run goes, its files written atomically, and reading it back.

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
    README.md                           the model card (see nlptasks.engine.reports.card)
    training_curves.png                 loss and the best-checkpoint metric by step
    COMPLETE                            written last: the run finished

With a ``[peft]`` table the model files are the adapter instead (``adapter_config.json``,
``adapter_model.safetensors``), with the frozen base under ``base/`` and a few inputs for
``nlptasks export --merge`` in ``examples.json`` (see :mod:`nlptasks.engine.model.examples`).
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.engine.io.checksums import seal, verify
from nlptasks.errors import NlptasksError

if TYPE_CHECKING:
    from nlptasks.recipe import LoadedRecipe

__all__ = [
    "COMPLETE",
    "MANIFEST",
    "RUN_STATE",
    "latest_run",
    "mark_complete",
    "read_manifest",
    "read_run_state",
    "remake_command",
    "resume_command",
    "run_dir_for",
    "runs_base",
    "write_error",
    "write_json",
    "write_text_atomic",
    "wrapped_io_error",
]

MANIFEST = "nlptasks.json"
COMPLETE = "COMPLETE"
RUN_STATE = "nlptasks-run.json"


def runs_base(loaded: LoadedRecipe) -> Path:
    """``<output.dir>/<task>``, absolute."""
    base = Path(loaded.recipe.output.dir)
    if not base.is_absolute():
        base = Path.cwd() / base
    return base / loaded.task.name


def run_dir_for(loaded: LoadedRecipe) -> Path:
    """The folder of a new run: ``output.run_name`` (an existing one is an error unless
    ``output.overwrite``), or the date and time."""
    out = loaded.recipe.output
    task_dir = runs_base(loaded)
    if out.run_name:
        path = task_dir / out.run_name
        if path.exists():
            if not out.overwrite:
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


def write_json(path: Path, value: Any) -> None:
    """``value`` as indented UTF-8 JSON, written atomically."""
    write_text_atomic(path, json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file, ``fsync`` and a rename: readers see the old file or
    the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def mark_complete(run_dir: Path) -> None:
    """Seal the folder (the sha256 of every file loading reads, in ``SHA256SUMS``: see
    :mod:`nlptasks.engine.io.checksums`), then write the ``COMPLETE`` marker: call it after every
    other file of the run is written, and again after changing one (the manifest, an adapter)."""
    seal(run_dir)
    write_text_atomic(run_dir / COMPLETE, _dt.datetime.now().isoformat(timespec="seconds") + "\n")


def read_run_state(run_dir: Path) -> dict[str, Any] | None:
    """``nlptasks-run.json`` of ``run_dir`` (what started the run), or ``None``."""
    try:
        return json.loads((run_dir / RUN_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def resume_command(run_dir: Path) -> str:
    """The command that continues ``run_dir`` (for hints)."""
    state = read_run_state(run_dir) or {}
    recipe = state.get("recipe_path") or "RECIPE"
    return f"nlptasks run {recipe} --resume {run_dir}"


def read_manifest(run_dir: Path, check: bool = True) -> dict[str, Any]:
    """The manifest of a complete run; an incomplete or foreign folder is an error saying what
    to do (every consumer of runs reads them through here: infer, eval, serve, export,
    add-adapter, load).  With ``check`` the files loading reads are checked against the run's
    ``SHA256SUMS`` first (:func:`~nlptasks.engine.io.checksums.verify`): a missing or damaged one
    is an error naming it."""
    path = run_dir / MANIFEST
    if not (run_dir / COMPLETE).exists():
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
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NlptasksError(
            f"{path}: cannot read the run manifest: {exc}", hint=f"Make it again: {remake_command(run_dir, {})}"
        ) from None
    if not isinstance(manifest, dict):
        raise NlptasksError(
            f"{path}: the run manifest is not a JSON object", hint=f"Make it again: {remake_command(run_dir, {})}"
        )
    if check:
        verify(run_dir, remake_command(run_dir, manifest))
    return manifest


def remake_command(run_dir: Path, manifest: dict[str, Any]) -> str:
    """The command that makes ``run_dir`` again: its export (``--onnx``, ``--merge``) from the run it
    came from, else the run of its resolved recipe."""
    onnx = manifest.get("onnx")
    if isinstance(onnx, dict) and onnx.get("exported_from"):
        return f"nlptasks export {onnx['exported_from']} --onnx NEW_FOLDER"
    merged = manifest.get("merged_from")
    if isinstance(merged, dict) and merged.get("run"):
        return f"nlptasks export {merged['run']} --merge NEW_FOLDER --adapter {merged.get('adapter', 'default')}"
    return f"nlptasks run {run_dir / 'recipe.toml'} --set output.run_name=NEW_NAME"


def latest_run(task: str, runs_dir: Path | None = None) -> Path | None:
    """The most recently completed run of ``task`` under ``runs_dir`` (default ``./runs``)."""
    base = (runs_dir or Path("runs")) / task
    if not base.is_dir():
        return None
    complete = [p.parent for p in base.glob(f"*/{COMPLETE}")]
    if not complete:
        return None
    return max(complete, key=lambda p: ((p / COMPLETE).stat().st_mtime, p.name))


# How libraries that write in native code report a failed write: safetensors ("I/O error: No space
# left on device (os error 28)"), torch.save ("PytorchStreamWriter failed writing file ...", or, when
# the write was cut short by a full disk or a file-size limit, "[enforce fail at
# inline_container.cc] . unexpected pos 221440 vs 221328").
_IO_MESSAGES = ("I/O error", "failed writing file", "No space left on device", "File too large")
_SHORT_WRITE = re.compile(r"unexpected pos \d+ vs \d+|inline_container\.cc")


def wrapped_io_error(exc: Exception, output_dir: Path) -> OSError | None:
    """An ``OSError`` for a write failure a library reported as another exception, naming the
    file being written (the newest file under the run folder), or ``None``."""
    text = str(exc)
    short = _SHORT_WRITE.search(text) is not None
    if not short and not any(m in text for m in _IO_MESSAGES):
        return None
    code = re.search(r"os error (\d+)", text)
    number = int(code.group(1)) if code else errno.ENOSPC if short else errno.EIO
    newest = None
    if output_dir.is_dir():
        # the file being written, or the folder a library removed its partial file from
        def mtime(p: Path) -> int:
            try:
                return p.stat().st_mtime_ns
            except OSError:
                return -1

        newest = max(output_dir.rglob("*"), key=mtime, default=None)
    if short and not code:
        reason = "a write was cut short (the disk is full, or a file-size limit was reached)"
    else:
        reason = os.strerror(number) if code else text.strip().splitlines()[0]
    return OSError(number, f"{reason} (a write failed here)", str(newest or output_dir))


def write_error(exc: OSError, output_dir: Path) -> NlptasksError:
    """An ``OSError`` met while a run reads and writes its folder, as one line naming the path."""
    path = exc.filename or output_dir
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = "The disk (or a size limit) is full: free space, or write the run elsewhere with --set output.dir=DIR."
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        hint = "Write the run to a folder you can write to: --set output.dir=DIR."
    else:
        hint = "Check the path; runs go to <output.dir>/<task>/<run_name> (--set output.dir=DIR)."
    return NlptasksError(f"{path}: {reason} (run folder {output_dir}; it is left incomplete)", hint=hint)
