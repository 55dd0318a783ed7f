"""``nlptasks export RUN --merge OUT``: a LoRA/IA3 adapter merged into a full model, checked."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nlptasks.cli._common import display

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser("export", help="merge a run's LoRA/IA3 adapter into a full model",
                       description="Merge a lora or ia3 adapter into the base weights and save a complete run "
                                   "that loads with plain transformers, after checking that it predicts exactly "
                                   "as the adapter did on inputs stored at training time.")
    p.add_argument("run", type=Path, help="run folder trained with [peft] (method lora or ia3)")
    p.add_argument("--merge", type=Path, required=True, metavar="OUT", help="folder to write the merged run to")
    p.add_argument("--adapter", metavar="NAME", help="the adapter to merge (default: the run's own)")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    if not args.run.is_dir():
        raise NlptasksError(f"{args.run}: no such folder")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    from nlptasks.engine.merge import export_merged

    result = export_merged(args.run, args.merge, args.adapter)
    merged = result["merged_from"]
    check = merged["check"]
    print(
        f"merged {merged['method']} adapter {merged['adapter']!r} into {display(args.merge)}; "
        f"same predictions on {check['inputs']} stored inputs (largest difference {check['max_abs_diff']:.1e})"
    )
    print(f"try: nlptasks infer --model {display(args.merge)} \"...\"")
    return 0
