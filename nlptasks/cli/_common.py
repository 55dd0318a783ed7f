"""What several commands share: the RECIPE and ``--set`` arguments, notes, display helpers, and
the argparse types every numeric option is read with (:func:`int_in`, :func:`finite_float`):
a value out of range, or not finite, is refused as argparse refuses a wrong type, naming the
flag and the allowed values, before any work starts."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "add_load_arguments",
    "add_recipe_arguments",
    "display",
    "finite_float",
    "int_in",
    "non_negative_int",
    "open_unit_float",
    "positive_int",
    "load_options",
    "print_notes",
    "task_of",
]


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The RECIPE argument and the repeatable ``--set KEY=VALUE`` of the commands that read a recipe."""
    p.add_argument("recipe", help="recipe file (TOML)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key (repeatable)",
    )


LOAD_FLAGS = (
    "precision",
    "backend",
    "device",
    "adapter",
    "base_only",
    "batch_size",
    "max_length",
    "threads",
    "threshold",
)


def add_load_arguments(p: Any, *flags: str) -> None:
    """The flags of step 10's :class:`nlptasks.LoadOptions` that a command offers (infer, eval,
    serve): ``precision``, ``backend``, ``device``, ``adapter``, ``base_only``, ``threads``,
    ``threshold``
    (``batch_size`` and ``max_length`` are the commands' own, with their own defaults)."""
    unknown = set(flags) - set(LOAD_FLAGS)
    assert not unknown, unknown
    if "precision" in flags:
        p.add_argument(
            "--precision",
            choices=("auto", "fp32", "bf16"),
            default="auto",
            help="inference dtype: auto = what the run measured on this CPU at its end (bf16 where it agreed "
            "with fp32, did not depend on the batch and was faster, else fp32; docs/onnx.md), else the "
            "precision the run was trained in where the device computes in it (bf16 for a bf16 run on a GPU "
            "with bf16 or a CPU with native bf16, AVX-512 BF16 or AMX), else fp32 (default: auto)",
        )
    if "backend" in flags:
        p.add_argument(
            "--backend",
            default="auto",
            metavar="NAME",
            help="runtime that loads the run: auto (default: ONNX Runtime for a folder made by `nlptasks "
            "export --onnx`; for a run, with --precision and --device auto, the fastest export of it that "
            "`nlptasks export` measured on this machine's CPU agreeing with its fp32 weights on validation "
            "rows (docs/onnx.md), else torch), torch, onnx, or a backend a plugin adds (`nlptasks plugins`); "
            "a named backend insists (an error when the folder is another backend's)",
        )
    if "device" in flags:
        p.add_argument(
            "--device",
            default="auto",
            metavar="DEVICE",
            help="auto (default: a CUDA GPU when there is one), cpu, cuda or cuda:N",
        )
    if "threads" in flags:
        p.add_argument(
            "--threads",
            type=positive_int,
            metavar="N",
            help="intra-op threads of a backend with its own thread pool (ONNX Runtime; default: "
            "$NLPTASKS_ONNX_THREADS, else torch's thread count)",
        )
    if "threshold" in flags:
        p.add_argument(
            "--threshold",
            type=open_unit_float,
            metavar="T",
            help="for a multi-label cls run: predict every label whose probability is at least T (above 0, "
            "below 1) instead of the thresholds the run chose on its validation split",
        )
    if "adapter" in flags:
        p.add_argument(
            "--adapter",
            metavar="NAME",
            help="for a run trained with [peft]: the adapter to use (default: the run's own, 'default'; "
            "others are added with `nlptasks add-adapter`)",
        )
    if "base_only" in flags:
        p.add_argument(
            "--base-only", action="store_true", help="for a run trained with [peft]: the frozen base alone, no adapter"
        )


def load_options(args: argparse.Namespace, **given: Any) -> Any:
    """The :class:`nlptasks.LoadOptions` of the load flags in ``args`` (and ``given`` values)."""
    from nlptasks.types import LoadOptions

    values = {name: getattr(args, name) for name in LOAD_FLAGS if getattr(args, name, None) is not None}
    values.update(given)
    return LoadOptions(**values)


def print_notes(loaded: Any) -> None:
    """Print what loading the recipe changed (``note: ...`` lines on stderr)."""
    for note in loaded.notes:
        print(f"note: {note}", file=sys.stderr)


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


def open_unit_float(text: str) -> float:
    """An argparse ``type``: a number above 0 and below 1 (a probability threshold)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number above 0 and below 1 (got {text!r})") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number above 0 and below 1 (got {text!r})")
    return value


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` to ``high`` (no upper bound: ``None``)."""
    allowed = f"at least {low}" if high is None else f"from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number {allowed} (got {text!r})") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {allowed} (got {value})")
        return value

    return parse


positive_int = int_in(1)
"""An argparse ``type``: a whole number, 1 or more."""
non_negative_int = int_in(0)
"""An argparse ``type``: a whole number, 0 or more."""


def finite_float(
    low: float | None = None, high: float | None = None, above: float | None = None
) -> Callable[[str], float]:
    """An argparse ``type``: a finite number (never ``nan`` or ``inf``) from ``low`` to ``high``
    (each bound included; ``None``: none), and more than ``above`` (excluded) when given."""
    bounds = [f"at least {low:g}"] if low is not None else []
    bounds += [f"more than {above:g}"] if above is not None else []
    bounds += [f"at most {high:g}"] if high is not None else []
    allowed = "a finite number" + (f" {' and '.join(bounds)}" if bounds else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {allowed} (got {text!r})") from None
        if (
            not math.isfinite(value)
            or (low is not None and value < low)
            or (high is not None and value > high)
            or (above is not None and value <= above)
        ):
            raise argparse.ArgumentTypeError(f"must be {allowed} (got {text})")
        return value

    return parse
