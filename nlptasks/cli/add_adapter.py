"""``nlptasks add-adapter RUN OTHER_RUN --name NAME``: another run's adapter on the same base."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nlptasks.cli._common import display

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "add-adapter",
        help="add another run's adapter to a run with the same base",
        description="Copy the adapter of OTHER_RUN into RUN under NAME (RUN/adapters/NAME), after "
        "checking that both were trained on the same base (task, labels, base model or "
        "from-scratch weights, tokenizer). Then: nlptasks infer --model RUN --adapter NAME.",
    )
    p.add_argument("run", type=Path, help="the run that keeps the base (trained with [peft])")
    p.add_argument("other", type=Path, metavar="OTHER_RUN", help="a run whose adapter to add (trained with [peft])")
    p.add_argument("--name", required=True, help="name of the added adapter (letters, digits, _ . -)")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    for path in (args.run, args.other):
        if not path.is_dir():
            raise NlptasksError(f"{path}: no such folder")
    from nlptasks.inference.adapters import add_adapter

    manifest = add_adapter(args.run, args.other, args.name)
    names = ", ".join(manifest["peft"]["adapters"])
    print(f"added adapter {args.name!r} to {display(args.run)} (adapters: {names})")
    print(f'try: nlptasks infer --model {display(args.run)} --adapter {args.name} "..."')
    return 0
