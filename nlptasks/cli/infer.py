"""``nlptasks infer``: predict with a trained run; texts, a file of any size (streamed) or stdin."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from nlptasks.cli._common import (
    add_load_arguments,
    finite_float,
    int_in,
    load_options,
    positive_int,
    task_of,
)

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "infer",
        help="predict with a trained run",
        description="Predict with a trained run: one result per input, as JSON lines on stdout by "
        "default. A --file (or stdin) of any size is streamed: read, predicted and written "
        "in chunks, with bounded memory and a progress bar on stderr.",
    )
    p.add_argument("texts", nargs="*", help="input texts (default: --file, or lines from stdin)")
    p.add_argument("--task", help="task whose latest complete run under --runs-dir to use, e.g. cls")
    p.add_argument("--model", type=Path, help="run directory to use (default: the latest run of --task)")
    p.add_argument(
        "--file",
        type=Path,
        help="inputs from a .txt (one per line), .csv, .tsv or .jsonl file (or a format of the task: see --format)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write the results to FILE instead of stdout (FILE.csv: --format csv)",
    )
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs are (default: ./runs)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="inputs per forward pass (default: 32)")
    p.add_argument(
        "--max-length",
        type=int_in(8),
        metavar="N",
        help="longest input in tokens (default: the run's model.max_length; tasks that window long "
        "inputs, e.g. ner, use it as the window)",
    )
    p.add_argument(
        "--format",
        dest="fmt",
        metavar="FORMAT",
        help="output format: jsonl (default) or csv; or a format the task offers, read from --file "
        "(or stdin) and written out, e.g. conll for ner (a --file whose extension names a task "
        "format uses it)",
    )
    add_load_arguments(p, "precision", "backend", "device", "threads", "threshold")
    p.add_argument(
        "--chunk-rows",
        type=positive_int,
        default=2048,
        metavar="N",
        help="inputs read, predicted and written at a time when streaming a file (default: 2048)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (rows, rows/s) on stderr while streaming (default: when stderr is a terminal)",
    )
    p.add_argument(
        "--candidates",
        type=Path,
        metavar="FILE",
        help="rank the lines (.txt) or rows (.csv, .jsonl) of FILE for each input, for tasks "
        "whose predictor can rank (pair in bi-encoder mode)",
    )
    p.add_argument(
        "--top-k", type=positive_int, default=5, metavar="K", help="with --candidates: best K per input (default: 5)"
    )
    add_load_arguments(p, "adapter", "base_only")
    g = p.add_argument_group("generation (tasks that generate text, e.g. sft)")
    g.add_argument("--max-new-tokens", type=positive_int, metavar="N", help="longest answer in tokens (default: 128)")
    g.add_argument(
        "--temperature", type=finite_float(0), metavar="T", help="sample with this temperature (default: 0, greedy)"
    )
    g.add_argument(
        "--top-p",
        type=finite_float(high=1, above=0),
        metavar="P",
        help="with --temperature: nucleus sampling mass (default: 1.0)",
    )
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import DataError, NlptasksError

    if args.texts and args.file:
        raise NlptasksError("give texts as arguments or --file, not both")
    if args.file is not None and not args.file.exists():
        raise DataError("file not found", path=str(args.file))
    if not args.texts and args.file is None and sys.stdin.isatty():
        raise NlptasksError(
            "nothing to predict: give texts, --file FILE, or pipe lines on stdin",
            hint='Example: nlptasks infer --task cls "这家酒店服务很好，房间也干净"',
        )
    if args.output is not None:  # an output that is an input is refused before anything loads
        from nlptasks.inference.streaming import check_output

        no_input = not args.texts and args.file is None
        check_output(
            args.output, {"--file": args.file, "--candidates": args.candidates}, sys.stdin if no_input else None
        )
    run_dir = _infer_run_dir(args)
    logging.getLogger("nlptasks").info("model: %s", run_dir)
    from transformers.utils import logging as hf_logging

    from nlptasks.inference.loading import load_predictor
    from nlptasks.inference.predict import Request, predict_to

    hf_logging.disable_progress_bar()  # its "Loading weights" bar; ours shows the long work
    predictor = load_predictor(run_dir, load_options(args))
    progress = args.progress if args.progress is not None else (sys.stderr.isatty() and not args.quiet)
    predict_to(
        predictor,
        Request(
            texts=list(args.texts),
            file=args.file,
            output=args.output,
            fmt=args.fmt,
            chunk_rows=args.chunk_rows,
            progress=progress,
            candidates=args.candidates,
            top_k=args.top_k,
            task=task_of(run_dir),
            generation={k: getattr(args, k) for k in ("max_new_tokens", "temperature", "top_p")},
        ),
    )
    return 0


def _infer_run_dir(args: argparse.Namespace) -> Path:
    """--model, or the latest complete run of --task under --runs-dir."""
    from nlptasks.errors import NlptasksError

    if args.model is not None:
        if not args.model.is_dir():
            raise NlptasksError(f"--model {args.model}: no such folder")
        return args.model
    if not args.task:
        raise NlptasksError("say which model to use: --task TASK (its latest run) or --model RUN_DIR")
    from nlptasks.pipeline import latest_run

    run_dir = latest_run(args.task, args.runs_dir)
    if run_dir is None:
        from nlptasks.pipeline import get_host

        get_host().task(args.task)  # unknown task → error with did-you-mean
        raise NlptasksError(
            f"no complete {args.task!r} run under {args.runs_dir}/{args.task}",
            hint=f"Train one first: nlptasks run recipes/{args.task}.toml   (or point --model at a run folder)",
        )
    return run_dir
