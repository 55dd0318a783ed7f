"""``nlptasks compare RUN_DIR ...``: one Markdown table of finished runs side by side."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "compare",
        help="compare finished runs: metrics, time, memory, recipe differences",
        description="Print one Markdown table of complete runs side by side: validation and test "
        "metrics, wall time, training samples/s, peak memory, and the recipe keys whose "
        "values differ. Refuses runs without a COMPLETE marker.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders (runs/<task>/<name>)")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.pipeline.compare import compare

    print(compare(list(args.runs)))
    return 0
