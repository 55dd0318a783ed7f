"""``nlptasks schema``: the recipe JSON Schema, each task's ``[options]`` included (for editors)."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "schema",
        help="print the recipe JSON Schema (for editors)",
        description="Print the JSON Schema of recipes, including each task's [options].",
    )
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.pipeline import get_host
    from nlptasks.recipe import recipe_json_schema

    print(json.dumps(recipe_json_schema(get_host().tasks), ensure_ascii=False, indent=2))
    return 0
