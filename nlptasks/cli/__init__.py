"""The ``nlptasks`` command line.

Import time matters here: only ``argparse`` and the standard library load before a command
runs, so ``nlptasks --help`` is instant; torch and transformers load inside the commands that
need them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXAMPLES = """\
examples:
  nlptasks run recipes/cls.toml                      train the quickstart (under a minute on CPU) 
  nlptasks run recipes/cls.toml --set train.epochs=1 override a recipe key
  nlptasks run recipes/cls.toml --resume             continue the run a crash interrupted
  nlptasks infer --task cls "服务很好"                label a text with the latest cls run
  nlptasks infer --task pair "怎么退款" "如何申请退款"  score a sentence pair
  nlptasks infer --task sft "湖畔酒店几点可以入住？"      generate an answer with the latest sft run
  nlptasks inspect-batch recipes/sft.toml            show the tokens a recipe feeds the model
  nlptasks run recipes/cls.toml --set peft.method=lora  train a LoRA adapter instead
  nlptasks export runs/cls/RUN --merge merged/       merge a lora/ia3 adapter into a full model
  nlptasks validate recipes/cls.toml                 check a recipe without running it
  nlptasks compare runs/cls/A runs/cls/B             metrics, time, memory and recipe differences
  nlptasks check recipes/ner.toml                    find problems in a recipe's data before training
  nlptasks plan recipes/cls.toml --gpu-mem 24GiB     estimate memory per ladder rung; pick one that fits
  nlptasks bench ladder recipes/cls.toml --steps 5   measure memory and speed of every ladder rung
  nlptasks plugins                                   list plugins, tasks and hooks
"""


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The RECIPE argument and the repeatable ``--set KEY=VALUE`` of the commands that read a recipe."""
    p.add_argument("recipe", help="recipe file (TOML)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe key (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    from nlptasks import __version__

    parser = argparse.ArgumentParser(
        prog="nlptasks",
        description="NLP fine-tuning as recipes and plugins.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nlptasks {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("run", help="train and evaluate a recipe", description="Run a recipe through the ten steps.")
    p.add_argument("recipe", help="recipe file (TOML)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe key, e.g. --set train.learning_rate=3e-5 (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="train on N processes (one per GPU, or CPU processes with gloo): starts "
                        "`python -m torch.distributed.run --standalone --nproc_per_node N -m nlptasks run ...` "
                        "(docs/optimize.md#distributed)")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="RUN_DIR",
                   help="continue the latest incomplete run of this recipe (or RUN_DIR) from its last complete "
                        "checkpoint (see output.checkpoint_steps); the recipe must be the one the run started with")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a recipe without running it",
                       description="Validate a recipe: report every problem with its key path.")
    add_recipe_arguments(p)
    p.add_argument("--show", action="store_true", help="print the resolved recipe (defaults filled in)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("check", help="the data doctor: find problems in a recipe's data before training",
                       description="Load and split a recipe's data (tokenizer only: no model weights, no GPU) and "
                                   "report label sets that differ between splits, class balance, empty and "
                                   "duplicate rows, train/validation/test overlap, what model.max_length would "
                                   "cut, and the task's own defects. Exits 1 when there are errors.")
    add_recipe_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
    p.set_defaults(func=cmd_check)

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
    p.set_defaults(func=cmd_infer)

    p = sub.add_parser("compare", help="compare finished runs: metrics, time, memory, recipe differences",
                       description="Print one Markdown table of complete runs side by side: validation and test "
                                   "metrics, wall time, training samples/s, peak memory, and the recipe keys whose "
                                   "values differ. Refuses runs without a COMPLETE marker.")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders (runs/<task>/<name>)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("inspect-batch", help="show the tokens a recipe feeds the model, and which are in the loss",
                       description="Run steps 1-4 of a recipe (no model, no training) and print examples token by "
                                   "token with their labels; fail if an example has no token in the loss.")
    add_recipe_arguments(p)
    p.add_argument("--split", default="train", help="which split to show (default: train)")
    p.add_argument("--rows", type=int, default=3, help="how many examples to show (default: 3)")
    p.set_defaults(func=cmd_inspect_batch)

    p = sub.add_parser("add-adapter", help="add another run's adapter to a run with the same base",
                       description="Copy the adapter of OTHER_RUN into RUN under NAME (RUN/adapters/NAME), after "
                                   "checking that both were trained on the same base (task, labels, base model or "
                                   "from-scratch weights, tokenizer). Then: nlptasks infer --model RUN --adapter NAME.")
    p.add_argument("run", type=Path, help="the run that keeps the base (trained with [peft])")
    p.add_argument("other", type=Path, metavar="OTHER_RUN", help="a run whose adapter to add (trained with [peft])")
    p.add_argument("--name", required=True, help="name of the added adapter (letters, digits, _ . -)")
    p.set_defaults(func=cmd_add_adapter)

    p = sub.add_parser("export", help="merge a run's LoRA/IA3 adapter into a full model",
                       description="Merge a lora or ia3 adapter into the base weights and save a complete run "
                                   "that loads with plain transformers, after checking that it predicts exactly "
                                   "as the adapter did on inputs stored at training time.")
    p.add_argument("run", type=Path, help="run folder trained with [peft] (method lora or ia3)")
    p.add_argument("--merge", type=Path, required=True, metavar="OUT", help="folder to write the merged run to")
    p.add_argument("--adapter", metavar="NAME", help="the adapter to merge (default: the run's own)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("plan", help="estimate peak training memory for each rung of the memory ladder",
                       description="Estimate peak training memory (weights, gradients, optimizer states, "
                                   "activations) of a recipe for each rung of the memory ladder: baseline, "
                                   "gradient accumulation, gradient checkpointing, Adafactor (8-bit AdamW on CUDA), "
                                   "frozen body, shorter max length, LoRA, QLoRA. The model is built on the meta "
                                   "device (exact parameter counts, no weights loaded). See docs/plan.md.")
    add_recipe_arguments(p)
    p.add_argument("--gpu-mem", metavar="SIZE",
                   help="a memory budget, e.g. 24GiB: name the first rung (the fastest) whose estimate fits, "
                        "with the largest micro-batch that keeps the effective batch")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="estimate for this device (default: this machine's); cuda means bf16 autocast with "
                        "train.precision=auto, boolean dropout masks and fused attention")
    p.add_argument("--probe", action="store_true",
                   help="also run a few real training steps per rung (each in a fresh process) and print the "
                        "measured peak beside the estimate: CUDA max allocated, or on CPU the peak RSS")
    p.add_argument("--steps", type=int, default=3, metavar="N", help="with --probe: steps per rung (default: 3)")
    p.add_argument("--rungs", metavar="NAMES", help="only these rungs, comma-separated (e.g. baseline,lora)")
    p.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("bench", help="benchmarks: `bench ladder RECIPE` runs every rung of the memory ladder",
                       description="Benchmarks that run the engine for real.")
    bench = p.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    b = bench.add_parser("ladder", help="train N steps per rung of the memory ladder; peak memory and speed",
                         description="Train N steps of the recipe for each rung of the memory ladder (each in a "
                                     "fresh process, inputs padded to model.max_length) and print the strategy, "
                                     "what it targets, the measured peak memory (CUDA max allocated, or on CPU the "
                                     "peak RSS), seconds per step and samples per second. See docs/plan.md.")
    add_recipe_arguments(b)
    b.add_argument("--steps", type=int, default=10, metavar="N", help="optimizer steps per rung (default: 10)")
    b.add_argument("--rungs", metavar="NAMES", help="only these rungs, comma-separated (e.g. baseline,accumulation)")
    b.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per rung (default: 600)")
    b.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
    b.set_defaults(func=cmd_bench_ladder)

    p = sub.add_parser("plugins", help="list installed plugins, their tasks and hooks",
                       description="List installed plugins, the tasks they provide and the hooks they implement.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("schema", help="print the recipe JSON Schema (for editors)",
                       description="Print the JSON Schema of recipes, including each task's [options].")
    p.set_defaults(func=cmd_schema)
    return parser


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (it may have been replaced since)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def setup_logging(quiet: bool) -> None:
    logger = logging.getLogger("nlptasks")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("nlptasks: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """The ``nlptasks`` command; returns the exit code.  A reader that closes stdout early
    (``nlptasks plugins | head``) ends the command quietly, with exit code 0."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here rather than at interpreter exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so Python's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. captured output)
        pass


def _main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for `run --nproc`, which starts itself again
    if args.command is None:
        parser.print_help()
        return 0
    setup_logging(args.quiet)
    from nlptasks.errors import NlptasksError

    try:
        return int(args.func(args) or 0)
    except NlptasksError as exc:
        if args.debug:
            raise
        print(f"error: {exc.render()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def _print_notes(loaded) -> None:  # noqa: ANN001 (LoadedRecipe; imported lazily)
    for note in loaded.notes:
        print(f"note: {note}", file=sys.stderr)


def _warn_remote_code(loaded) -> None:  # noqa: ANN001 (LoadedRecipe; imported lazily)
    """check and inspect-batch load the tokenizer, which runs remote code too when allowed."""
    model = loaded.recipe.model
    if model.name_or_path and model.trust_remote_code:
        from nlptasks.engine.modeling import warn_remote_code

        warn_remote_code(logging.getLogger("nlptasks"), model.name_or_path, True)


def cmd_validate(args: argparse.Namespace) -> int:
    from nlptasks.recipe import dump_toml, load_recipe

    loaded = load_recipe(args.recipe, args.overrides)
    _print_notes(loaded)
    r = loaded.recipe
    data = r.data.hub or ", ".join(f"{k}={getattr(r.data, k)}" for k in ("train", "validation", "test") if getattr(r.data, k))
    model = r.model.name_or_path or f"from scratch ({r.model.scratch.architecture}, {r.model.scratch.tokenizer} vocabulary)"  # type: ignore[union-attr]
    if args.show:
        print(dump_toml(loaded.resolved()), end="")
    else:
        print(f"ok: {args.recipe}: task {loaded.task.name!r}, data {data}, model {model}")
    _note_machine(loaded)
    return 0


def _note_machine(loaded) -> None:  # noqa: ANN001 (LoadedRecipe; imported lazily)
    """A valid recipe may still ask for what this machine lacks (a CUDA GPU, bitsandbytes): say so
    as a note, with the settings that run here, as ``run`` would refuse it at start."""
    from nlptasks.engine.adapters import check_machine, machine_problems
    from nlptasks.errors import RecipeError

    if not machine_problems(loaded.recipe, cuda=False, bitsandbytes=False):
        return  # asks for nothing machine-specific: no need to load torch to find out
    try:
        check_machine(loaded.recipe, str(loaded.path))
    except RecipeError as exc:
        print("note: valid, but `nlptasks run` refuses it on this machine:", file=sys.stderr)
        for problem in exc.problems:
            print(f"note:   {problem}", file=sys.stderr)
        if exc.hint:
            print(f"note: {exc.hint}", file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    from nlptasks.recipe import load_recipe

    loaded = load_recipe(args.recipe, args.overrides)
    _print_notes(loaded)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _warn_remote_code(loaded)
    from nlptasks.engine.doctor import check

    report = check(loaded)
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        print(report.text())
    return 1 if report.errors else 0


def cmd_run(args: argparse.Namespace) -> int:
    from nlptasks.recipe import load_recipe

    loaded = load_recipe(args.recipe, args.overrides)  # errors show before any process starts
    if args.nproc is not None:
        return _launch(args.nproc, args.argv)
    from nlptasks.engine.distributed import is_main

    main = is_main()
    if main:
        _print_notes(loaded)
    else:  # the other ranks of a distributed run: no notes, logs, bars or table
        logging.getLogger("nlptasks").setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from nlptasks.engine.runner import run

    result = run(loaded, progress=not args.no_progress and main, resume=args.resume)
    if not main:
        return 0
    print(format_metrics(result.metrics))
    print(f"\nmodel saved to {_display(result.output_dir)} ({result.seconds:.0f} s)")
    print(f"try: nlptasks infer --model {_display(result.output_dir)} \"...\"")
    return 0


def _launch(nproc: int, argv: list[str]) -> int:
    """``nlptasks run --nproc N``: the same command again under torchrun, without ``--nproc``."""
    import subprocess

    from nlptasks.engine.distributed import torchrun_command
    from nlptasks.errors import NlptasksError

    if nproc < 1:
        raise NlptasksError(f"--nproc: {nproc} processes; give 1 or more")
    if "WORLD_SIZE" in os.environ:
        raise NlptasksError("--nproc: already inside a distributed launcher (WORLD_SIZE is set); drop --nproc")
    command = torchrun_command(nproc, argv)
    print("launch: " + " ".join(command[1:]), file=sys.stderr)
    return subprocess.call(command)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def format_metrics(metrics: dict[str, Any]) -> str:
    """The final table: overall metrics by split, then the per-class report of the last split."""
    splits = [s for s in ("validation", "test") if s in metrics]
    if not splits:
        splits = [s for s in metrics if isinstance(metrics[s], dict) and s not in {"dropped", "train"}]
    skip = {"runtime", "samples_per_second", "steps_per_second", "epoch"}
    keys: list[str] = []
    for s in splits:
        for k in metrics[s]:
            if "/" not in k and k not in skip and k not in keys:
                keys.append(k)
    width = max([len(k) for k in keys] + [8])
    lines = ["metric".ljust(width) + "".join(s.rjust(12) for s in splits)]
    for k in keys:
        row = k.ljust(width)
        for s in splits:
            v = metrics[s].get(k)
            row += (f"{v:.4f}" if isinstance(v, float) else str(v if v is not None else "-")).rjust(12)
        lines.append(row)
    last = splits[-1] if splits else None
    per_class = {k: v for k, v in (metrics.get(last) or {}).items() if "/" in k} if last else {}
    if per_class:
        names = sorted({k.split("/", 1)[0] for k in per_class})
        classes: list[str] = []
        for k in per_class:
            c = k.split("/", 1)[1]
            if c not in classes:
                classes.append(c)
        cw = max([len(c) for c in classes] + [5])
        lines += ["", f"per class ({last})", "class".ljust(cw) + "".join(n.rjust(11) for n in names)]
        for c in classes:
            row = c.ljust(cw)
            for n in names:
                v = per_class.get(f"{n}/{c}")
                row += (f"{v:.0f}" if n == "support" and v is not None else f"{v:.4f}" if v is not None else "-").rjust(11)
            lines.append(row)
    dropped = metrics.get("dropped") or {}
    if dropped:
        parts = [f"{split}: " + ", ".join(f"{n} {reason}" for reason, n in d.items()) for split, d in dropped.items()]
        lines += ["", "dropped rows: " + "; ".join(parts)]
    train = metrics.get("train") or {}
    if "samples_per_second" in train:
        lines.append(f"\ntraining: {train.get('runtime', 0):.0f} s, {train['samples_per_second']:.1f} samples/s")
    return "\n".join(lines)


def read_input_file(path: Path) -> list[Any]:
    """Rows of a .csv/.tsv/.json/.jsonl file as dicts, or the non-empty lines of any other file."""
    from nlptasks.engine.streaming import iter_file

    return list(iter_file(path))


def cmd_infer(args: argparse.Namespace) -> int:
    from nlptasks.errors import DataError, NlptasksError

    if args.texts and args.file:
        raise NlptasksError("give texts as arguments or --file, not both")
    if args.file is not None and not args.file.exists():
        raise DataError("file not found", path=str(args.file))
    for flag, value, least in (("--batch-size", args.batch_size, 1), ("--chunk-rows", args.chunk_rows, 1),
                               ("--max-length", args.max_length, 8)):
        if value is not None and value < least:
            raise NlptasksError(f"{flag} must be at least {least}")
    if not args.texts and args.file is None and sys.stdin.isatty():
        raise NlptasksError(
            "nothing to predict: give texts, --file FILE, or pipe lines on stdin",
            hint='Example: nlptasks infer --task cls "这家酒店服务很好，房间也干净"',
        )
    run_dir = _infer_run_dir(args)
    logging.getLogger("nlptasks").info("model: %s", run_dir)
    from transformers.utils import logging as hf_logging

    from nlptasks.engine.inference import set_inference_precision
    from nlptasks.engine.runner import load_predictor

    hf_logging.disable_progress_bar()  # its "Loading weights" bar; ours shows the long work
    set_inference_precision(args.precision)
    predictor = load_predictor(run_dir, adapter=args.adapter, base_only=args.base_only)
    if hasattr(predictor, "batch_size"):
        predictor.batch_size = args.batch_size
    if args.max_length is not None and hasattr(predictor, "max_length"):
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
    return streaming.iter_rows(sys.stdin, "txt")


def _infer_run_dir(args: argparse.Namespace) -> Path:
    """--model, or the latest complete run of --task under --runs-dir."""
    from nlptasks.errors import NlptasksError

    if args.model is not None:
        if not args.model.is_dir():
            raise NlptasksError(f"--model {args.model}: no such folder")
        return args.model
    if not args.task:
        raise NlptasksError("say which model to use: --task TASK (its latest run) or --model RUN_DIR")
    from nlptasks.engine.runner import latest_run

    run_dir = latest_run(args.task, args.runs_dir)
    if run_dir is None:
        from nlptasks.plugins import get_host

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
        raise NlptasksError(f"{flags}: the {_task_of(run_dir)!r} task does not generate text",
                            hint="Generation settings apply to generating tasks such as sft.")
    if given.get("max_new_tokens", 1) < 1:
        raise NlptasksError("--max-new-tokens must be at least 1")
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
        f"--format {fmt}: the {_task_of(run_dir)!r} task does not read or write this format "
        f"(formats: {offered})",
        hint="Leave out --format for JSON lines; `nlptasks infer --help` lists the options.",
    )


def _rank(args: argparse.Namespace, predictor: Any, run_dir: Path, queries: list[Any]) -> list[dict[str, Any]]:
    """``--candidates FILE --top-k K``: the predictor's ``rank()``, or an error naming the task."""
    from nlptasks.errors import NlptasksError

    rank = getattr(predictor, "rank", None)
    if rank is None:
        raise NlptasksError(
            f"--candidates: the {_task_of(run_dir)!r} run in {run_dir} cannot rank candidates",
            hint="Ranking needs a predictor with rank(), e.g. a pair run trained with options.mode = \"bi\".",
        )
    if args.top_k < 1:
        raise NlptasksError("--top-k must be at least 1")
    return rank(queries, read_input_file(args.candidates), args.top_k)


def _task_of(run_dir: Path) -> str:
    try:
        return json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8")).get("task", "?")
    except (OSError, ValueError):
        return "?"


def cmd_compare(args: argparse.Namespace) -> int:
    from nlptasks.engine.report import compare

    print(compare(list(args.runs)))
    return 0


def cmd_inspect_batch(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError
    from nlptasks.recipe import load_recipe

    if args.rows < 1:
        raise NlptasksError("--rows must be at least 1")
    loaded = load_recipe(args.recipe, args.overrides)
    _print_notes(loaded)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _warn_remote_code(loaded)
    from nlptasks.engine.inspect import inspect_batch

    inspect_batch(loaded, split=args.split, rows=args.rows)
    return 0


def cmd_add_adapter(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    for path in (args.run, args.other):
        if not path.is_dir():
            raise NlptasksError(f"{path}: no such folder")
    from nlptasks.engine.adapters import add_adapter

    manifest = add_adapter(args.run, args.other, args.name)
    names = ", ".join(manifest["peft"]["adapters"])
    print(f"added adapter {args.name!r} to {_display(args.run)} (adapters: {names})")
    print(f"try: nlptasks infer --model {_display(args.run)} --adapter {args.name} \"...\"")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    if not args.run.is_dir():
        raise NlptasksError(f"{args.run}: no such folder")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    from nlptasks.engine.adapters import export_merged

    result = export_merged(args.run, args.merge, args.adapter)
    merged = result["merged_from"]
    check = merged["check"]
    print(
        f"merged {merged['method']} adapter {merged['adapter']!r} into {_display(args.merge)}; "
        f"same predictions on {check['inputs']} stored inputs (largest difference {check['max_abs_diff']:.1e})"
    )
    print(f"try: nlptasks infer --model {_display(args.merge)} \"...\"")
    return 0


def _ladder_plan(args: argparse.Namespace, device: str | None) -> Any:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from nlptasks.engine.plan import make_plan

    rungs = [r.strip() for r in args.rungs.split(",") if r.strip()] if getattr(args, "rungs", None) else None
    plan = make_plan(args.recipe, args.overrides, device=device, rungs=rungs)
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    return plan


def _measure_rungs(args: argparse.Namespace, plan: Any, steps: int, timeout: float) -> dict[str, dict[str, Any]]:
    from nlptasks.engine.probe import measure

    measured: dict[str, dict[str, Any]] = {}
    for row in plan.rows:
        name = row.rung.name
        if row.needs or row.estimate is None:
            measured[name] = {"skipped": row.needs or "not estimated"}
            continue
        logging.getLogger("nlptasks").info("measuring rung %s (%d steps)", name, steps)
        measured[name] = measure(args.recipe, [*args.overrides, *row.rung.overrides], steps, timeout=timeout)
        if "error" in measured[name]:
            measured[name]["skipped"] = measured[name]["error"]
    return measured


def _measure_label(measured: dict[str, dict[str, Any]]) -> str:
    kinds = {m.get("measure", "") for m in measured.values() if m.get("peak") is not None}
    if any(k.startswith("cuda") for k in kinds):
        return "measured (CUDA max allocated)"
    return "measured (CPU peak RSS, not GPU memory)"


def cmd_plan(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    if args.steps < 1:
        raise NlptasksError("--steps must be at least 1")
    budget = None
    if args.gpu_mem:
        from nlptasks.engine.plan import parse_size

        budget = parse_size(args.gpu_mem)
    device = None if args.device == "auto" else args.device
    if args.probe and device is not None:
        import torch

        here = "cuda" if torch.cuda.is_available() else "cpu"
        if device != here:
            raise NlptasksError(f"--probe measures on this machine ({here}); leave out --device {device} or --probe")
    plan = _ladder_plan(args, device)
    measured = _measure_rungs(args, plan, args.steps, 600.0) if args.probe else None
    from nlptasks.engine.plan import choose, human, plan_text

    choice = choose(plan, budget) if budget is not None else None
    if args.json:
        payload = plan.to_json()
        if measured is not None:
            for rung in payload["rungs"]:
                rung["measured"] = measured.get(rung["name"])
        if budget is not None:
            payload["budget"] = budget
            payload["choice"] = (
                {"rung": choice.row.rung.name, "micro_batch": choice.micro_batch, "accumulation": choice.accumulation,
                 "estimate": choice.estimate.to_json(), "overrides": choice.overrides()}
                if choice else None
            )
        print(json.dumps(payload, ensure_ascii=False, indent=2))
        return 0
    print(f"plan {args.recipe}: {plan.model_class}, effective batch {plan.effective_batch}, estimated for {plan.device}")
    print(plan_text(plan, measured, _measure_label(measured) if measured is not None else ""))
    if measured is not None and not any(k.startswith("cuda") for k in (m.get("measure", "") for m in measured.values())):
        print("measured on CPU: peak resident memory from model building to the end of training, minus the "
              "resident memory before it; it includes allocator and library overhead and is not GPU memory")
    if budget is not None:
        if choice is None:
            smallest = min((r.estimate.total for r in plan.rows if r.estimate and not r.needs), default=None)
            print(f"\nno rung fits {human(budget)} on {plan.device} (smallest estimate {human(smallest)})")
            return 1
        sets = " ".join(f"--set {o}" for o in choice.overrides())
        print(f"\nfits {human(budget)}: {choice.row.rung.label.lstrip('+ ')} with micro-batch {choice.micro_batch} x "
              f"accumulation {choice.accumulation} (estimate {human(choice.estimate.total)})"
              + (f"; note: {choice.row.rung.changes}" if choice.row.rung.changes else ""))
        print(f"run: nlptasks run {args.recipe} {sets}".rstrip())
    return 0


def cmd_bench_ladder(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    if args.steps < 1:
        raise NlptasksError("--steps must be at least 1")
    plan = _ladder_plan(args, None)
    measured = _measure_rungs(args, plan, args.steps, args.timeout)
    from nlptasks.engine.plan import human, table

    rows, records = [], []
    for row in plan.rows:
        r, m = row.rung, measured.get(row.rung.name, {})
        effective = r.micro_batch * r.accumulation
        sps = m.get("seconds_per_step")
        rows_per_epoch = m.get("train_rows")
        epoch = -(-rows_per_epoch // effective) * sps if sps and rows_per_epoch else None
        record = {
            "rung": r.name, "strategy": r.label, "targets": r.targets, "micro_batch": r.micro_batch,
            "accumulation": r.accumulation, "peak": m.get("peak"), "measure": m.get("measure"),
            "estimate": row.estimate.total if row.estimate else None, "seconds_per_step": sps,
            "samples_per_second": effective / sps if sps else None, "epoch_seconds": epoch,
            "train_rows": rows_per_epoch, "steps": m.get("steps"), "skipped": m.get("skipped"),
            "overrides": list(r.overrides),
        }
        records.append(record)
        if m.get("peak") is None:
            rows.append([r.label, r.targets, f"{r.micro_batch}x{r.accumulation}", "-", human(record["estimate"]), "-", "-",
                         "-", f"skipped: {m.get('skipped', '-')}"])
            continue
        rows.append([r.label, r.targets, f"{r.micro_batch}x{r.accumulation}", human(m["peak"]), human(record["estimate"]),
                     f"{sps:.3f}" if sps else "-", f"{record['samples_per_second']:.1f}" if sps else "-",
                     f"{epoch:.0f}" if epoch else "-", r.changes])
    if args.json:
        print(json.dumps({"recipe": args.recipe, "device": plan.device, "model_class": plan.model_class,
                          "steps": args.steps, "rungs": records}, ensure_ascii=False, indent=2))
        return 0
    label = _measure_label(measured)
    print(f"bench ladder {args.recipe}: {plan.model_class}, effective batch {plan.effective_batch}, "
          f"{args.steps} steps per rung on {plan.device}, inputs padded to model.max_length")
    print(table(["strategy", "targets", "batch", f"peak {label.removeprefix('measured ')}", "estimate",
                 "s/step", "samples/s", "s/epoch", "note"], rows, right={2, 3, 4, 5, 6, 7}))
    print("s/epoch: seconds per step x optimizer steps in one epoch of the training rows (as the classic table's time)")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from nlptasks.plugins import get_host

    host = get_host()
    infos = host.infos()
    if args.json:
        payload = {
            "plugins": [info.__dict__ for info in infos],
            "tasks": {
                name: {"plugin": spec.plugin, "description": spec.description, "best_metric": spec.best_metric_text(),
                       "peft_task_type": spec.peft_task_type_text()}
                for name, spec in sorted(host.tasks.items())
            },
            "failures": [f.__dict__ for f in host.failures],
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2))
        return 0
    for info in infos:
        version = f" {info.version}" if info.version else ""
        print(f"{info.name}  ({info.dist}{version})")
        for task in info.tasks:
            spec = host.tasks[task]
            print(f"  task {task}: {spec.description}")
            print(f"    best metric: {spec.best_metric_text()}; peft: {spec.peft_task_type_text()}")
        print(f"  hooks: {', '.join(info.hooks) or '-'}")
    for failure in host.failures:
        print(f"FAILED {failure}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from nlptasks.plugins import get_host
    from nlptasks.recipe import recipe_json_schema

    print(json.dumps(recipe_json_schema(get_host().tasks), ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
