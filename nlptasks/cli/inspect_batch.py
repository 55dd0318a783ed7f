"""``nlptasks inspect-batch RECIPE``: steps 1 to 4, then examples token by token with what the loss sees."""

from __future__ import annotations

import argparse
import os
from typing import Any

from nlptasks.cli._common import add_recipe_arguments, positive_int, print_notes

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "inspect-batch",
        help="show the tokens a recipe feeds the model, and which are in the loss",
        description="Run steps 1-4 of a recipe (no model, no training) and print examples token by "
        "token with their labels; fail if an example has no token in the loss.",
    )
    add_recipe_arguments(p)
    p.add_argument("--split", default="train", help="which split to show (default: train)")
    p.add_argument("--rows", type=positive_int, default=3, help="how many examples to show (default: 3)")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(args.recipe, args.overrides)
    print_notes(loaded)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from nlptasks.pipeline import inspect_batch

    inspect_batch(loaded, split=args.split, rows=args.rows)
    return 0
