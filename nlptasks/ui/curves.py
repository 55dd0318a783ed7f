"""A run's training curves: points ``{"step", "epoch", "values": {series: value}}`` with series
``loss``, ``learning_rate`` and ``eval_<metric>`` (validation), from the best source there is:

1. a complete run's ``log_history.json`` (the Trainer's own entries, exact);
2. the log of each ``python -m nlptasks run`` the dashboard started for the run folder (its
   ``step N/M (epoch E): loss ...`` and ``validation (epoch E): ...`` lines on stderr, the lines the
   Trainer's log callback prints anyway: four significant digits), read incrementally, the newest
   log winning a step two logs both have (a resumed run logs its steps again);
3. the newest checkpoint's ``trainer_state.json`` (a run started elsewhere: exact, up to that
   checkpoint).

Reading them costs the training process nothing: the run writes these files whether or not a
page watches (docs/ui.md measures it).  A validation line names its epoch, not its step: its step
is the epoch times the steps per epoch of the last ``step`` line (exact with ``eval_strategy =
"epoch"``, to a logging interval with ``"steps"``).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["LogReader", "curve", "points_from_history"]

_SKIP = ("runtime", "samples_per_second", "steps_per_second", "total_flos", "epoch", "step", "grad_norm")
_STEP = re.compile(r"^(?:nlptasks: )?step (\d+)/(\d+)(?: \(epoch ([\d.eE+-]+)\))?: (.*)$")
_EVAL = re.compile(r"^(?:nlptasks: )?validation(?: \(epoch ([\d.eE+-]+)\))?: (.*)$")
_VALUE = re.compile(r"([A-Za-z_][\w]*) (-?[\d.]+(?:e[+-]?\d+)?|nan|inf)")


def _series(entry: Mapping[str, Any]) -> dict[str, float]:
    if any(k.startswith("train_") for k in entry) and "loss" not in entry:
        return {}  # the Trainer's summary entry at the end of training
    return {
        k: float(v)
        for k, v in entry.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and "/" not in k and not k.endswith(_SKIP)
    }


def points_from_history(history: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chart points from the Trainer's ``log_history`` entries (training and validation ones; the
    test entry, timings, per-class values and the end-of-training summary left out)."""
    points = []
    for entry in history:
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
            continue
        if any(k.startswith("test_") for k in entry):
            continue
        values = _series(entry)
        if values:
            points.append({"step": entry["step"], "epoch": entry.get("epoch"), "values": values})
    return _merge([points])  # one point per step: the evaluation after training repeats the last step's


class _Tail:
    """What was read of one log so far: the byte offset and the points and progress parsed."""

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.offset = 0
        self.rest = b""
        self.points: list[dict[str, Any]] = []
        self.progress: dict[str, Any] | None = None
        self.per_epoch: float | None = None


class LogReader:
    """Parses the logs of the runs the dashboard started, reading only the bytes added since the
    last look (a poll every two seconds on a long run reads a few lines, not the whole log)."""

    def __init__(self) -> None:
        self._tails: dict[Path, _Tail] = {}
        self._lock = threading.Lock()

    def read(self, log: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """``(points, progress)`` of ``log`` so far; progress is ``{"step", "max_steps"}``."""
        with self._lock:
            tail = self._tails.setdefault(log, _Tail())
            try:
                stat = os.stat(log)
            except OSError:
                return [], None
            key = (stat.st_ino, stat.st_dev)
            if tail.key != key or stat.st_size < tail.offset:  # a new or truncated file: from the start
                tail.__init__()  # type: ignore[misc]
                tail.key = key
            if stat.st_size > tail.offset:
                with log.open("rb") as fh:
                    fh.seek(tail.offset)
                    data = tail.rest + fh.read(stat.st_size - tail.offset)
                tail.offset = stat.st_size
                *lines, tail.rest = data.split(b"\n")
                for line in lines:
                    self._parse(tail, line.decode("utf-8", errors="replace").rstrip("\r"))
            return list(tail.points), tail.progress

    @staticmethod
    def _parse(tail: _Tail, line: str) -> None:
        line = line.rsplit("\r", 1)[-1]  # a progress bar's last state, if there is one
        match = _STEP.match(line)
        if match:
            step, max_steps, epoch = int(match[1]), int(match[2]), match[3]
            values = {k: float(v) for k, v in _VALUE.findall(match[4]) if not k.endswith(_SKIP)}
            epoch_value = float(epoch) if epoch else None
            if epoch_value:
                tail.per_epoch = step / epoch_value
            tail.progress = {"step": step, "max_steps": max_steps}
            if values:
                tail.points.append({"step": step, "epoch": epoch_value, "values": values})
            return
        match = _EVAL.match(line)
        if match:
            epoch_value = float(match[1]) if match[1] else None
            values = {f"eval_{k}": float(v) for k, v in _VALUE.findall(match[2]) if not k.endswith(_SKIP)}
            last = tail.progress["step"] if tail.progress else 0
            step = round(epoch_value * tail.per_epoch) if epoch_value and tail.per_epoch else last
            if values:
                tail.points.append({"step": step, "epoch": epoch_value, "values": values})


def _merge(sources: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Points by step, a later source's values replacing an earlier one's for the same series."""
    by_step: dict[int, dict[str, Any]] = {}
    for points in sources:
        for point in points:
            kept = by_step.setdefault(point["step"], {"step": point["step"], "epoch": point.get("epoch"), "values": {}})
            kept["values"].update(point["values"])
            if point.get("epoch") is not None:
                kept["epoch"] = point["epoch"]
    return [by_step[s] for s in sorted(by_step)]


def _checkpoint_state(run_dir: Path) -> dict[str, Any] | None:
    best: tuple[int, Path] | None = None
    for folder in (run_dir / "checkpoints").glob("checkpoint-*"):
        tail = folder.name.rpartition("-")[2]
        if tail.isdigit() and (folder / "trainer_state.json").is_file() and (best is None or int(tail) > best[0]):
            best = (int(tail), folder / "trainer_state.json")
    if best is None:
        return None
    try:
        state = json.loads(best[1].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def curve(run_dir: Path, logs: list[Path], reader: LogReader) -> dict[str, Any]:
    """The run's points, its progress (``{"step", "max_steps"}`` or ``None``) and their ``source``:
    ``log_history`` (complete), ``live`` (the dashboard's logs), ``checkpoint`` or ``none``."""
    if (run_dir / "COMPLETE").exists() and (run_dir / "log_history.json").is_file():
        try:
            history = json.loads((run_dir / "log_history.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return {"points": [], "progress": None, "source": "none", "problem": f"log_history.json: {exc}"}
        points = points_from_history(history if isinstance(history, list) else [])
        last = points[-1]["step"] if points else None
        return {"points": points, "progress": {"step": last, "max_steps": last}, "source": "log_history"}
    state = _checkpoint_state(run_dir)
    saved = points_from_history(state.get("log_history") or []) if state else []
    progress = {"step": state.get("global_step"), "max_steps": state.get("max_steps")} if state else None
    if logs:
        parsed = [reader.read(log) for log in logs]
        newest = next((p for _, p in reversed(parsed) if p), None)
        return {
            "points": _merge([saved, *(points for points, _ in parsed)]),
            "progress": newest or progress,
            "source": "live",
        }
    return {"points": saved, "progress": progress, "source": "checkpoint" if state else "none"}
