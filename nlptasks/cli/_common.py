"""What several commands share: the RECIPE and ``--set`` arguments, notes, display helpers."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_recipe_arguments", "check_positive", "display", "print_notes", "task_of", "warn_remote_code"]


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The RECIPE argument and the repeatable ``--set KEY=VALUE`` of the commands that read a recipe."""
    p.add_argument("recipe", help="recipe file (TOML)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe key (repeatable)")


def add_backend_argument(p: Any) -> None:
    """``--backend auto|torch|onnx`` (infer, eval, serve): which runtime loads the run folders."""
    p.add_argument("--backend", choices=("auto", "torch", "onnx"), default="auto",
                   help="auto (default): ONNX Runtime for a folder made by `nlptasks export --onnx`, else torch; "
                        "onnx/torch insist (an error when the folder is the other kind)")


def print_notes(loaded: Any) -> None:
    """Print what loading the recipe changed (``note: ...`` lines on stderr)."""
    for note in loaded.notes:
        print(f"note: {note}", file=sys.stderr)


def warn_remote_code(loaded: Any) -> None:
    """check and inspect-batch load the tokenizer, which runs remote code too when allowed."""
    model = loaded.recipe.model
    if model.name_or_path and model.trust_remote_code:
        from nlptasks.engine.modeling import warn_remote_code as warn

        warn(logging.getLogger("nlptasks"), model.name_or_path, True)


def display(path: Path) -> str:
    """``path`` relative to the current directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def task_of(run_dir: Path) -> str:
    """The task of a run folder, from its manifest (``?`` when unreadable)."""
    try:
        return json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8")).get("task", "?")
    except (OSError, ValueError):
        return "?"


def check_positive(flag: str, value: int | None, least: int = 1) -> None:
    """``--flag N`` must be at least ``least``."""
    if value is not None and value < least:
        from nlptasks.errors import NlptasksError

        raise NlptasksError(f"{flag} must be at least {least}")

