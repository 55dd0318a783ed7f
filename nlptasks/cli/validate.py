"""``nlptasks validate RECIPE``: every problem of a recipe with its key path, without running it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nlptasks.cli._common import add_recipe_arguments, positive_int, print_notes

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "validate",
        help="check a recipe without running it",
        description="Validate a recipe: report every problem with its key path.",
    )
    add_recipe_arguments(p)
    p.add_argument("--show", action="store_true", help="print the resolved recipe (defaults filled in)")
    p.add_argument(
        "--nproc",
        type=positive_int,
        metavar="N",
        help="check it as `nlptasks run --nproc N` runs it (DeepSpeed's keys need a distributed launch)",
    )
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.pipeline import load_recipe
    from nlptasks.recipe import dump_toml

    loaded = load_recipe(args.recipe, args.overrides)
    print_notes(loaded)
    from nlptasks.pipeline.validate import check_launch, machine_notes, preflight

    check_launch(loaded, args.nproc)  # DeepSpeed without --nproc or its package: refused, as run refuses it
    preflight(loaded)  # what a run checks before it reads data: libraries, config.json, memory
    r = loaded.recipe
    data = r.data.hub or ", ".join(
        f"{k}={getattr(r.data, k)}" for k in ("train", "validation", "test") if getattr(r.data, k)
    )
    model = (
        r.model.name_or_path or f"from scratch ({r.model.scratch.architecture}, {r.model.scratch.tokenizer} vocabulary)"
    )  # type: ignore[union-attr]
    if args.show:
        print(dump_toml(loaded.resolved()), end="")
    else:
        print(f"ok: {args.recipe}: task {loaded.task.name!r}, data {data}, model {model}")
    for note in machine_notes(loaded, launched=args.nproc is not None):
        print(f"note: {note}", file=sys.stderr)
    return 0
