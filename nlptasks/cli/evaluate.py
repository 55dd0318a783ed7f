"""``nlptasks eval RUN --data FILE``: score a trained run on new labelled data."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nlptasks.cli._common import add_load_arguments, display, load_options

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "eval",
        help="score a trained run on new labelled data (metrics, errors file)",
        description="Score a complete run on labelled data in its task's format: the file is read "
        "and preprocessed exactly as the run's training data was (its tokenizer, labels, "
        "windows, template) and scored with the task's metrics, so the run's own test "
        "file gives back the test metrics `nlptasks run` printed. Writes an eval folder "
        "(metrics.json, errors.jsonl with every wrong prediction and its file row, "
        "report.md, the confusion matrix where the task has one).",
    )
    p.add_argument("run", type=Path, help="a complete run folder (runs/<task>/<name>)")
    p.add_argument(
        "--data",
        type=Path,
        action="append",
        required=True,
        metavar="FILE",
        help="labelled data to score (repeatable: one eval folder per file)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="read the data differently, e.g. options.text_column=review (only options.*, data.*, "
        "train.eval_batch_size and train.precision, which --precision also sets)",
    )
    p.add_argument("-o", "--output", type=Path, metavar="DIR", help="the eval folder (default: RUN/eval/<timestamp>)")
    add_load_arguments(p, "precision", "adapter", "base_only", "backend")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="show the libraries' progress bars (default: off)",
    )
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    if not args.run.is_dir():
        raise NlptasksError(f"{args.run}: no such folder", hint="Pass the folder `nlptasks run` printed.")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    from nlptasks.cli.run import format_metrics
    from nlptasks.pipeline.evaluate import ERRORS, evaluate_run

    results = evaluate_run(
        args.run, args.data, args.overrides, args.output, options=load_options(args), progress=args.progress
    )
    for result in results:
        print(
            f"{display(result.source)}: {result.rows} rows, {result.examples} examples scored in "
            f"{result.seconds:.1f} s ({result.rows_per_second:,.0f} rows/s, the model's load included)"
        )
        print(format_metrics({"test": result.metrics, "dropped": {"test": result.dropped} if result.dropped else {}}))
        if result.errors is None:
            print("errors: the task does not list its wrong predictions (nlptasks_errors)")
        else:
            print(f"errors: {result.errors} wrong prediction(s) in {display(result.output_dir / ERRORS)}")
        print(f"eval saved to {display(result.output_dir)} ({result.seconds:.0f} s)")
    return 0
