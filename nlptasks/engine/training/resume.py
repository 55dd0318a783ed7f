"""Resume after a crash: which run folder to continue, and from which checkpoint.

A run writes ``nlptasks-run.json`` into its folder when it starts: the resolved recipe, its
SHA-256 and the recipe file it came from.  ``nlptasks run RECIPE --resume [RUN_DIR]`` finds the
latest run of that recipe without a ``COMPLETE`` marker, refuses one whose recipe differs (naming
each key that differs), and continues it from the newest checkpoint that passes
:func:`checkpoint_problem`; a partial or corrupt checkpoint is moved aside as
``checkpoints/broken-checkpoint-N`` with a message, never loaded.

A checkpoint is complete when the Trainer wrote all of it: ``trainer_state.json`` (written after
the weights, optimizer, scheduler and RNG state) parses, every safetensors file is as long as its
header says, and the ``torch.save`` files are whole zip archives.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import struct
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.engine.io.rundir import COMPLETE, RUN_STATE, read_run_state, write_json
from nlptasks.errors import NlptasksError, Problem

if TYPE_CHECKING:
    from nlptasks.recipe import LoadedRecipe

__all__ = ["checkpoint_problem", "checkpoint_step", "differences", "find_run", "latest_checkpoint", "write_run_state"]

log = logging.getLogger("nlptasks")

# What a resumable checkpoint holds besides the weights (the Trainer's names).
FULL_STATE_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth")


def write_run_state(run_dir: Path, loaded: LoadedRecipe) -> None:
    """Record what started this run (read back by ``--resume``): the recipe as hashed, its
    SHA-256 (:meth:`nlptasks.recipe.LoadedRecipe.fingerprint`, the manifest's hash too) and the
    recipe file."""
    resolved, digest = loaded.fingerprint()
    path = run_dir / RUN_STATE
    state: dict[str, Any] = {}
    if path.exists():
        state = read_run_state(run_dir) or {}
    state.update(
        recipe_sha256=digest,
        recipe_path=str(Path(loaded.path).resolve()) if loaded.path else None,
        recipe=resolved,
    )
    state.setdefault("started", _dt.datetime.now().isoformat(timespec="seconds"))
    write_json(path, state)


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """``key.path: A in the run, B now`` for each leaf that differs."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            where = f"{prefix}.{key}" if prefix else key
            out += differences(old.get(key), new.get(key), where)
        return out
    if old == new:
        return []
    was, now = json.dumps(old, ensure_ascii=False), json.dumps(new, ensure_ascii=False)
    return [f"{prefix or 'recipe'}: {was} in the run, {now} now"]


def find_run(loaded: LoadedRecipe, base: Path, run_dir: Path | None = None) -> Path:
    """The run folder ``--resume`` continues: ``run_dir`` when given, else the latest incomplete
    run of this recipe under ``base`` (``<output.dir>/<task>``)."""
    source = str(loaded.path or "<recipe>")
    resolved, digest = loaded.fingerprint()
    if run_dir is not None:
        if not run_dir.is_dir():
            raise NlptasksError(f"--resume {run_dir}: no such folder")
        state = read_run_state(run_dir)
        if state is None:
            raise NlptasksError(
                f"--resume {run_dir}: not a run folder made by `nlptasks run` (no readable {RUN_STATE})",
                hint=f"Leave out the folder to resume the latest incomplete run of {source}.",
            )
        if (run_dir / COMPLETE).exists():
            raise NlptasksError(
                f"--resume {run_dir}: this run is complete; there is nothing to resume",
                hint=f'Use it: nlptasks infer --model {run_dir} "..."   (or start a new run without --resume)',
            )
        _same_recipe(state, resolved, digest, run_dir, source)
        return run_dir
    candidates = []
    if base.is_dir():
        for folder in base.iterdir():
            state = read_run_state(folder) if folder.is_dir() else None
            if state is not None and not (folder / COMPLETE).exists():
                candidates.append((((folder / RUN_STATE).stat().st_mtime, folder.name), folder, state))
    if not candidates:
        raise NlptasksError(
            f"--resume: no incomplete run of task {loaded.task.name!r} under {base}",
            hint=f"Start one: nlptasks run {source}",
        )
    candidates.sort(key=lambda c: c[0], reverse=True)
    for _, folder, state in candidates:
        if state.get("recipe_sha256") == digest:
            return folder
    _, folder, state = candidates[0]
    _same_recipe(state, resolved, digest, folder, source)  # raises: says what differs
    raise AssertionError("unreachable")


def _same_recipe(state: dict[str, Any], resolved: dict[str, Any], digest: str, run_dir: Path, source: str) -> None:
    if state.get("recipe_sha256") == digest:
        return
    changed = differences(state.get("recipe", {}), resolved)
    raise NlptasksError(
        f"--resume {run_dir}: the run was started with another recipe than {source}; {len(changed)} key(s) differ",
        problems=[Problem("", line) for line in changed] or [Problem("", "the recipe hash differs")],
        hint="Resume with the recipe (and --set values) the run started with, or start a new run without --resume.",
    )


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------


def _safetensors_problem(path: Path) -> str | None:
    """Whether a safetensors file is whole: its header parses and the data is as long as it says."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path.name} is truncated ({size} bytes)"
            (length,) = struct.unpack("<Q", head)
            if length > size - 8:
                return f"{path.name} is truncated (header of {length} bytes, file of {size})"
            header = json.loads(fh.read(length))
    except (OSError, ValueError) as exc:
        return f"{path.name} cannot be read ({exc})"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        return f"{path.name} is truncated ({size} of {expected} bytes)"
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why ``path`` (a ``checkpoint-N`` folder) cannot be resumed from, or ``None`` if it can."""
    state_file = path / "trainer_state.json"
    if not state_file.exists():
        return "no trainer_state.json (the save did not finish)"
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
        int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return "trainer_state.json is unreadable"
    deepspeed = _deepspeed_state(path)  # ZeRO: optimizer (and, under ZeRO-3, weights) in global_stepN/
    if isinstance(deepspeed, str):
        return deepspeed
    weights = sorted(path.glob("*.safetensors"))
    if not weights and not deepspeed:
        pickled = [p.name for p in path.glob("*.bin") if p.name != "training_args.bin"]
        return f"no safetensors weights{' (only ' + ', '.join(pickled) + ')' if pickled else ''}"
    for file in weights:
        problem = _safetensors_problem(file)
        if problem:
            return problem
    # one rng_state_<rank>.pth per process in a distributed run; DeepSpeed keeps the optimizer itself
    found = {name: [path / name] for name in FULL_STATE_FILES}
    found["rng_state.pth"] += sorted(path.glob("rng_state_*.pth"))
    if deepspeed:
        found["optimizer.pt"] = deepspeed
    missing = [name for name, files in found.items() if not any(f.exists() for f in files)]
    if missing:
        return f"model weights only, no {', '.join(missing)} (not a resumable checkpoint)"
    for files in found.values():
        for file in files:
            if file.exists() and not zipfile.is_zipfile(file):
                return f"{file.relative_to(path)} is truncated or not a torch.save file"
    return None


def _deepspeed_state(path: Path) -> list[Path] | str | None:
    """A DeepSpeed checkpoint's files (``latest`` names its ``global_stepN`` folder, written last),
    why it is incomplete, or ``None`` when ``path`` holds none."""
    steps = list(path.glob("global_step*"))
    if not steps:
        return None
    try:
        tag = (path / "latest").read_text(encoding="utf-8").strip()
    except OSError:
        return "DeepSpeed state without its 'latest' file (the save did not finish)"
    files = sorted((path / tag).glob("*_optim_states.pt")) if tag else []
    if not files:
        return f"DeepSpeed state {tag or '?'} has no optimizer states"
    return files + sorted((path / tag).glob("*_model_states.pt"))


def checkpoint_step(path: Path) -> int:
    """The optimizer step of a ``checkpoint-N`` folder (-1 for a name without one)."""
    try:
        return int(path.name.rsplit("-", 1)[-1])
    except ValueError:
        return -1


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The newest complete checkpoint; newer partial or corrupt ones are moved aside (``broken-...``)
    with a message naming each and why."""
    if not checkpoints_dir.is_dir():
        return None
    folders = sorted(
        (p for p in checkpoints_dir.glob("checkpoint-*") if p.is_dir() and checkpoint_step(p) >= 0),
        key=checkpoint_step,
        reverse=True,
    )
    for folder in folders:
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        aside = folder.with_name(f"broken-{folder.name}")
        n = 2
        while aside.exists():
            aside, n = folder.with_name(f"broken-{folder.name}-{n}"), n + 1
        try:
            os.replace(folder, aside)
            moved = f"; moved to {aside.name}"
        except OSError:
            moved = ""
        log.warning("skipped checkpoint %s: %s%s", folder, problem, moved)
    return None
