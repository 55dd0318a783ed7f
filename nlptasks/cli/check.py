"""``nlptasks check RECIPE``: the data doctor (steps 1 to 3 and every plugin's checks)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from nlptasks.cli._common import add_recipe_arguments, print_notes

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "check",
        help="the data doctor: find problems in a recipe's data before training",
        description="Load and split a recipe's data (tokenizer only: no model weights, no GPU) and "
        "report label sets that differ between splits, class balance, empty and "
        "duplicate rows, train/validation/test overlap, what model.max_length would "
        "cut, and the task's own defects. Exits 1 when there are errors.",
    )
    add_recipe_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(args.recipe, args.overrides)
    print_notes(loaded)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from nlptasks.pipeline import check

    report = check(loaded)
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        print(report.text())
    return 1 if report.errors else 0
