"""``nlptasks infer``: predict with a trained run; texts, a file of any size (streamed) or stdin."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path
from typing import Any

from nlptasks.cli._common import add_backend_argument, check_positive, task_of

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser("infer", help="predict with a trained run",
                       description="Predict with a trained run: one result per input, as JSON lines on stdout by "
                                   "default. A --file (or stdin) of any size is streamed: read, predicted and written "
                                   "in chunks, with bounded memory and a progress bar on stderr.")
    p.add_argument("texts", nargs="*", help="input texts (default: --file, or lines from stdin)")
    p.add_argument("--task", help="task whose latest complete run under --runs-dir to use, e.g. cls")
    p.add_argument("--model", type=Path, help="run directory to use (default: the latest run of --task)")
    p.add_argument("--file", type=Path, help="inputs from a .txt (one per line), .csv, .tsv or .jsonl file (or a "
                                             "format of the task: see --format)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="write the results to FILE instead of stdout (FILE.csv: --format csv)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs are (default: ./runs)")
    p.add_argument("--batch-size", type=int, default=32, help="inputs per forward pass (default: 32)")
    p.add_argument("--max-length", type=int, metavar="N",
                   help="longest input in tokens (default: the run's model.max_length; tasks that window long "
                        "inputs, e.g. ner, use it as the window)")
    p.add_argument("--format", dest="fmt", metavar="FORMAT",
                   help="output format: jsonl (default) or csv; or a format the task offers, read from --file "
                        "(or stdin) and written out, e.g. conll for ner (a --file whose extension names a task "
                        "format uses it)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="inference dtype: auto = bf16 on a CUDA GPU that supports it, else fp32 (default: auto); "
                        "bf16 also runs on a CPU with native bf16 (AVX-512 BF16 or AMX), about twice as fast")
    add_backend_argument(p)
    p.add_argument("--chunk-rows", type=int, default=2048, metavar="N",
                   help="inputs read, predicted and written at a time when streaming a file (default: 2048)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (rows, rows/s) on stderr while streaming (default: when stderr is a terminal)")
    p.add_argument("--candidates", type=Path, metavar="FILE",
                   help="rank the lines (.txt) or rows (.csv, .jsonl) of FILE for each input, for tasks "
                        "whose predictor can rank (pair in bi-encoder mode)")
    p.add_argument("--top-k", type=int, default=5, metavar="K", help="with --candidates: best K per input (default: 5)")
    p.add_argument("--adapter", metavar="NAME",
                   help="for a run trained with [peft]: the adapter to use (default: the run's own, 'default'; "
                        "others are added with `nlptasks add-adapter`)")
    p.add_argument("--base-only", action="store_true",
                   help="for a run trained with [peft]: predict with the frozen base alone, no adapter")
    g = p.add_argument_group("generation (tasks that generate text, e.g. sft)")
    g.add_argument("--max-new-tokens", type=int, metavar="N", help="longest answer in tokens (default: 128)")
    g.add_argument("--temperature", type=float, metavar="T", help="sample with this temperature (default: 0, greedy)")
    g.add_argument("--top-p", type=float, metavar="P", help="with --temperature: nucleus sampling mass (default: 1.0)")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import DataError, NlptasksError

    if args.texts and args.file:
        raise NlptasksError("give texts as arguments or --file, not both")
    if args.file is not None and not args.file.exists():
        raise DataError("file not found", path=str(args.file))
    for flag, value, least in (("--batch-size", args.batch_size, 1), ("--chunk-rows", args.chunk_rows, 1),
                               ("--max-length", args.max_length, 8)):
        check_positive(flag, value, least)
    if not args.texts and args.file is None and sys.stdin.isatty():
        raise NlptasksError(
            "nothing to predict: give texts, --file FILE, or pipe lines on stdin",
            hint='Example: nlptasks infer --task cls "这家酒店服务很好，房间也干净"',
        )
    run_dir = _infer_run_dir(args)
    logging.getLogger("nlptasks").info("model: %s", run_dir)
    from transformers.utils import logging as hf_logging

    from nlptasks.engine.inference import set_inference_precision
    from nlptasks.pipeline import load_predictor

    hf_logging.disable_progress_bar()  # its "Loading weights" bar; ours shows the long work
    set_inference_precision(args.precision)
    from nlptasks.engine.onnx_runtime import backend_for_loading

    with backend_for_loading(args.backend):  # for this load only: in-process callers load others after
        predictor = load_predictor(run_dir, adapter=args.adapter, base_only=args.base_only)
    if hasattr(predictor, "batch_size"):
        predictor.batch_size = args.batch_size
    if args.max_length is not None and hasattr(predictor, "max_length"):
        from nlptasks.engine.inference import position_limit

        limit = position_limit(getattr(predictor, "model", None))
        if limit is not None and args.max_length > limit:
            raise NlptasksError(f"--max-length {args.max_length}: the run's model has positions for {limit} tokens",
                                hint=f"Use --max-length {limit} or less (or leave it out: the run's own).")
        predictor.max_length = args.max_length
    _configure_generation(args, predictor, run_dir)
    task_fmt, out_fmt = _chosen_format(args, predictor, run_dir)
    if task_fmt is not None and args.texts:
        raise NlptasksError(f"--format {task_fmt} reads --file or stdin, not texts given as arguments")
    if task_fmt is not None and args.candidates is not None:
        raise NlptasksError(f"--candidates ranks JSON lines; it does not go with --format {task_fmt}")

    from nlptasks.engine import streaming

    out = streaming.open_output(args.output)
    try:
        writer: Any
        if task_fmt is not None:
            writer = streaming.TaskFormatWriter(predictor, task_fmt, out)
        elif out_fmt == "csv":
            writer = streaming.CsvWriter(out)
        else:
            writer = streaming.JsonlWriter(out)
        if args.candidates is not None:
            queries = list(args.texts) if args.texts else list(_input_stream(args, None, predictor))
            writer.write(_rank(args, predictor, run_dir, queries))
        elif args.texts:
            writer.write(predictor(list(args.texts)))
        else:
            progress = args.progress if args.progress is not None else (sys.stderr.isatty() and not args.quiet)
            total = streaming.count_rows(args.file) if progress and args.file is not None and task_fmt is None else None
            streaming.stream_predictions(
                predictor, _input_stream(args, task_fmt, predictor), writer.write, chunk_rows=args.chunk_rows,
                total=total, progress=progress, source=str(args.file) if args.file is not None else "<stdin>",
            )
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _input_stream(args: argparse.Namespace, task_fmt: str | None, predictor: Any) -> Any:
    """The inputs of --file or stdin, read lazily (in the task's format when one is chosen)."""
    from nlptasks.engine import streaming

    if task_fmt is not None:
        return predictor.read_inputs(args.file, task_fmt, sys.stdin)
    if args.file is not None:
        return streaming.iter_file(args.file)
    return streaming.iter_stdin(sys.stdin)


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


def _configure_generation(args: argparse.Namespace, predictor: Any, run_dir: Path) -> None:
    """Pass --max-new-tokens/--temperature/--top-p to a predictor that generates."""
    from nlptasks.errors import NlptasksError

    given = {k: getattr(args, k) for k in ("max_new_tokens", "temperature", "top_p") if getattr(args, k) is not None}
    if not given:
        return
    configure = getattr(predictor, "configure_generation", None)
    if configure is None:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise NlptasksError(f"{flags}: the {task_of(run_dir)!r} task does not generate text",
                            hint="Generation settings apply to generating tasks such as sft.")
    if given.get("max_new_tokens", 1) < 1:
        raise NlptasksError("--max-new-tokens must be at least 1")
    for flag, value in given.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise NlptasksError(f"--{flag.replace('_', '-')} must be a finite number (got {value})")
    if given.get("temperature", 0) < 0:
        raise NlptasksError("--temperature must be 0 (greedy) or more")
    if not 0 < given.get("top_p", 1.0) <= 1:
        raise NlptasksError("--top-p must be in (0, 1]")
    configure(**given)


def _chosen_format(args: argparse.Namespace, predictor: Any, run_dir: Path) -> tuple[str | None, str]:
    """``(task format, output format)``: the task format to read and write (``--format NAME`` the
    task offers, or a --file extension it offers), else ``None`` and jsonl or csv."""
    from nlptasks.engine.streaming import OUTPUT_FORMATS
    from nlptasks.errors import NlptasksError

    formats = dict(getattr(predictor, "formats", None) or {})
    fmt = args.fmt
    if fmt is None and args.file is not None and args.file.suffix.lower().lstrip(".") in formats:
        fmt = args.file.suffix.lower().lstrip(".")  # e.g. --file dev.conll
    if fmt is None and args.output is not None and args.output.suffix.lower() == ".csv":
        fmt = "csv"
    if fmt in formats:
        return fmt, fmt
    if fmt is None or fmt in OUTPUT_FORMATS:
        return None, fmt or "jsonl"
    offered = ", ".join([*OUTPUT_FORMATS, *sorted(formats)])
    raise NlptasksError(
        f"--format {fmt}: the {task_of(run_dir)!r} task does not read or write this format "
        f"(formats: {offered})",
        hint="Leave out --format for JSON lines; `nlptasks infer --help` lists the options.",
    )


def _rank(args: argparse.Namespace, predictor: Any, run_dir: Path, queries: list[Any]) -> list[dict[str, Any]]:
    """``--candidates FILE --top-k K``: the predictor's ``rank()``, or an error naming the task."""
    from nlptasks.errors import NlptasksError

    rank = getattr(predictor, "rank", None)
    if rank is None:
        raise NlptasksError(
            f"--candidates: the {task_of(run_dir)!r} run in {run_dir} cannot rank candidates",
            hint="Ranking needs a predictor with rank(), e.g. a pair run trained with options.mode = \"bi\".",
        )
    if args.top_k < 1:
        raise NlptasksError("--top-k must be at least 1")
    from nlptasks.engine.streaming import iter_file

    return rank(queries, list(iter_file(args.candidates)), args.top_k)

