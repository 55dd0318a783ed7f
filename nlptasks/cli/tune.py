"""``nlptasks tune RECIPE``: hyperparameter search with Optuna over the recipe's ``[tune.space]``
keys; each trial an ordinary run in the study folder (docs/tune.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from nlptasks.cli._common import add_recipe_arguments, display, finite_float, non_negative_int, positive_int

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "tune",
        help="search hyperparameters over recipe keys (Optuna)",
        description="Run the study of a recipe's [tune] table: each trial is a run of the recipe with the "
        "trial's values for the [tune.space] keys. The study is stored in a database (default: "
        "<output.dir>/<task>/tune-<study>/study.db), so running the command again finishes the "
        "missing trials, and several processes (--workers, or other machines on one --storage) "
        "share it. See docs/tune.md.",
    )
    add_recipe_arguments(p)
    p.add_argument(
        "--trials",
        type=positive_int,
        metavar="N",
        help="the study's total of finished trials (complete, pruned, failed); default tune.trials",
    )
    p.add_argument(
        "--timeout",
        type=finite_float(above=0),
        metavar="S",
        help="start no new trial after S seconds (default tune.timeout)",
    )
    p.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna RDB storage URL, e.g. postgresql://user:pw@host/db (default: the variable "
        "NLPTASKS_TUNE_STORAGE, which keeps a password out of the process list, else sqlite:///<study folder>/study.db)",
    )
    p.add_argument("--study", metavar="NAME", help="study name (default: the recipe file's name without .toml)")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="K",
        help="run K processes on the study (this one and K-1 more), each with cores/K threads",
    )
    p.add_argument("--worker-index", type=non_negative_int, default=0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from nlptasks.tune import STORAGE_ENV, tune

    result = tune(
        args.recipe,
        args.overrides,
        trials=args.trials,
        timeout=args.timeout,
        storage=args.storage or os.environ.get(STORAGE_ENV) or None,
        study=args.study,
        workers=args.workers,
        worker_index=args.worker_index,
    )
    if args.worker_index:
        return 0
    print(result.table)
    for note in result.notes:
        print(f"note: {note}")
    folder = display(result.study_dir)
    print(f"\nstudy {result.study_name}: {folder} (results.md, history.png, importance.png)")
    if result.best is not None:
        print(
            f"best: trial {result.best.number}, validation {result.metric} {result.best.value:.4f}: "
            f"{display(result.best.run_dir) if result.best.run_dir else '?'}"
        )
        print(f"try: nlptasks run {folder}/best.toml")
    return 0
