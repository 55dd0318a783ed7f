"""``nlptasks run RECIPE``: train, evaluate and save a run; print its metrics and how to use it."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from nlptasks.cli._common import display, non_negative_int, positive_int, print_notes

__all__ = ["cmd", "format_metrics", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser("run", help="train and evaluate a recipe", description="Run a recipe through the ten steps.")
    p.add_argument("recipe", help="recipe file (TOML)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key, e.g. --set train.learning_rate=3e-5 (repeatable)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--nproc",
        type=positive_int,
        metavar="N",
        help="train on N processes (one per GPU, or CPU processes with gloo): starts "
        "`python -m torch.distributed.run --standalone --nproc_per_node N -m nlptasks run ...` "
        "(docs/optimize.md#distributed)",
    )
    g = p.add_argument_group(
        "several machines",
        "torchrun's rendezvous: run the same command on every machine, with "
        "--nproc (docs/optimize.md#several-machines)",
    )
    g.add_argument("--nnodes", type=positive_int, default=1, metavar="M", help="machines taking part (default: 1)")
    g.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="an address every machine reaches (the rendezvous)")
    g.add_argument(
        "--node-rank",
        type=non_negative_int,
        metavar="R",
        help="this machine's rank, 0 to M-1, for a static rendezvous (machine 0 is at --rdzv-endpoint "
        "and writes the run); without it torchrun's c10d rendezvous ranks machines as they arrive",
    )
    g.add_argument("--rdzv-id", default="nlptasks", metavar="ID", help="the job's name in the c10d rendezvous")
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="RUN_DIR",
        help="continue the latest incomplete run of this recipe (or RUN_DIR) from its last complete "
        "checkpoint (see output.checkpoint_steps); the recipe must be the one the run started with",
    )
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(args.recipe, args.overrides)  # errors show before any process starts
    if args.nproc is None and (args.nnodes != 1 or args.rdzv_endpoint or args.node_rank is not None):
        from nlptasks.errors import NlptasksError

        raise NlptasksError(
            "--nnodes, --rdzv-endpoint and --node-rank start torchrun: add --nproc N (processes per machine)"
        )
    if args.nproc is not None:
        from nlptasks.pipeline.launch import launch
        from nlptasks.pipeline.validate import check_launch

        check_launch(loaded, args.nproc)  # before torchrun starts N processes that would each fail

        return launch(args.nproc, args.argv, args.nnodes, args.rdzv_endpoint, args.node_rank, args.rdzv_id)
    from nlptasks.pipeline.launch import is_main

    main = is_main()
    if main:
        print_notes(loaded)
    else:  # the other ranks of a distributed run: no notes, logs, bars or table
        logging.getLogger("nlptasks").setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from nlptasks.pipeline import run

    result = run(loaded, progress=not args.no_progress and main, resume=args.resume)
    if not main:
        return 0
    print(format_metrics(result.metrics))
    print(f"\nmodel saved to {display(result.output_dir)} ({result.seconds:.0f} s)")
    print(f"try: {result.try_command(display(result.output_dir))}")
    return 0


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
                row += (f"{v:.0f}" if n == "support" and v is not None else f"{v:.4f}" if v is not None else "-").rjust(
                    11
                )
            lines.append(row)
    dropped = metrics.get("dropped") or {}
    if dropped:
        parts = [f"{split}: " + ", ".join(f"{n} {reason}" for reason, n in d.items()) for split, d in dropped.items()]
        lines += ["", "dropped rows: " + "; ".join(parts)]
    train = metrics.get("train") or {}
    if "samples_per_second" in train:
        line = f"\ntraining: {train.get('runtime', 0):.0f} s, {train['samples_per_second']:.1f} samples/s"
        if "tokens_per_second" in train:
            line += f", {train['tokens_per_second']:.0f} tokens/s ({train['padding_fraction']:.0%} padding)"
        if "mfu" in train:
            line += f", MFU {train['mfu']:.1%} of {train['peak_tflops']:g} TFLOP/s ({train['peak_source']})"
        lines.append(line)
    return "\n".join(lines)
