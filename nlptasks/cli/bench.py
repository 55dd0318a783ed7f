"""``nlptasks bench ladder RECIPE``: train N steps per rung of the memory ladder, each in a fresh
process; measured peak memory, seconds per step, samples per second."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nlptasks.cli._common import add_recipe_arguments, finite_float, positive_int
from nlptasks.cli.plan import ladder_plan, measure_label, measure_rungs

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "bench",
        help="benchmarks: `bench ladder RECIPE` runs every rung of the memory ladder",
        description="Benchmarks that run the engine for real.",
    )
    bench = p.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    b = bench.add_parser(
        "ladder",
        help="train N steps per rung of the memory ladder; peak memory and speed",
        description="Train N steps of the recipe for each rung of the memory ladder (each in a "
        "fresh process, inputs padded to model.max_length) and print the strategy, "
        "what it targets, the measured peak memory (CUDA max allocated, or on CPU the "
        "peak RSS), seconds per step and samples per second. See docs/plan.md.",
    )
    add_recipe_arguments(b)
    b.add_argument("--steps", type=positive_int, default=10, metavar="N", help="optimizer steps per rung (default: 10)")
    b.add_argument("--rungs", metavar="NAMES", help="only these rungs, comma-separated (e.g. baseline,accumulation)")
    b.add_argument(
        "--timeout", type=finite_float(above=0), default=600.0, metavar="S", help="seconds per rung (default: 600)"
    )
    b.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
    b.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:

    plan = ladder_plan(args, None)
    measured = measure_rungs(args, plan, args.steps, args.timeout)
    from nlptasks.plan import human, table

    rows, records = [], []
    for row in plan.rows:
        r, m = row.rung, measured.get(row.rung.name, {})
        effective = r.micro_batch * r.accumulation
        sps = m.get("seconds_per_step")
        rows_per_epoch = m.get("train_rows")
        epoch = -(-rows_per_epoch // effective) * sps if sps and rows_per_epoch else None
        record = {
            "rung": r.name,
            "strategy": r.label,
            "targets": r.targets,
            "micro_batch": r.micro_batch,
            "accumulation": r.accumulation,
            "peak": m.get("peak"),
            "measure": m.get("measure"),
            "estimate": row.estimate.total if row.estimate else None,
            "seconds_per_step": sps,
            "samples_per_second": effective / sps if sps else None,
            "epoch_seconds": epoch,
            "train_rows": rows_per_epoch,
            "steps": m.get("steps"),
            "skipped": m.get("skipped"),
            "overrides": list(r.overrides),
        }
        records.append(record)
        if m.get("peak") is None:
            rows.append(
                [
                    r.label,
                    r.targets,
                    f"{r.micro_batch}x{r.accumulation}",
                    "-",
                    human(record["estimate"]),
                    "-",
                    "-",
                    "-",
                    f"skipped: {m.get('skipped', '-')}",
                ]
            )
            continue
        rows.append(
            [
                r.label,
                r.targets,
                f"{r.micro_batch}x{r.accumulation}",
                human(m["peak"]),
                human(record["estimate"]),
                f"{sps:.3f}" if sps else "-",
                f"{record['samples_per_second']:.1f}" if sps else "-",
                f"{epoch:.0f}" if epoch else "-",
                r.changes,
            ]
        )
    if args.json:
        print(
            json.dumps(
                {
                    "recipe": args.recipe,
                    "device": plan.device,
                    "model_class": plan.model_class,
                    "steps": args.steps,
                    "rungs": records,
                },
                ensure_ascii=False,
                indent=2,
            )
        )
        return 0
    label = measure_label(measured)
    print(
        f"bench ladder {args.recipe}: {plan.model_class}, effective batch {plan.effective_batch}, "
        f"{args.steps} steps per rung on {plan.device}, inputs padded to model.max_length"
    )
    print(
        table(
            [
                "strategy",
                "targets",
                "batch",
                f"peak {label.removeprefix('measured ')}",
                "estimate",
                "s/step",
                "samples/s",
                "s/epoch",
                "note",
            ],
            rows,
            right={2, 3, 4, 5, 6, 7},
        )
    )
    print("s/epoch: seconds per step x optimizer steps in one epoch of the training rows (as the classic table's time)")
    return 0
