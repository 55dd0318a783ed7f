"""``nlptasks plan RECIPE``: estimated peak training memory per rung of the memory ladder; the rung
that fits a budget; with ``--probe``, measured beside the estimate."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from nlptasks.cli._common import add_recipe_arguments, positive_int

__all__ = ["cmd", "ladder_plan", "measure_label", "measure_rungs", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "plan",
        help="estimate peak training memory for each rung of the memory ladder",
        description="Estimate peak training memory (weights, gradients, optimizer states, "
        "activations) of a recipe for each rung of the memory ladder: baseline, "
        "gradient accumulation, gradient checkpointing, Adafactor (8-bit AdamW on CUDA), "
        "frozen body, shorter max length, LoRA, QLoRA. The model is built on the meta "
        "device (exact parameter counts, no weights loaded). See docs/plan.md.",
    )
    add_recipe_arguments(p)
    p.add_argument(
        "--gpu-mem",
        metavar="SIZE",
        help="a memory budget, e.g. 24GiB: name the first rung (the fastest) whose estimate fits, "
        "with the largest micro-batch that keeps the effective batch",
    )
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="estimate for this device (default: this machine's); cuda means bf16 autocast with "
        "train.precision=auto, boolean dropout masks and fused attention",
    )
    p.add_argument(
        "--probe",
        action="store_true",
        help="also run a few real training steps per rung (each in a fresh process) and print the "
        "measured peak beside the estimate: CUDA max allocated, or on CPU the peak RSS",
    )
    p.add_argument(
        "--steps", type=positive_int, default=3, metavar="N", help="with --probe: steps per rung (default: 3)"
    )
    p.add_argument("--rungs", metavar="NAMES", help="only these rungs, comma-separated (e.g. baseline,lora)")
    p.add_argument(
        "--nproc",
        type=positive_int,
        default=1,
        metavar="N",
        help="processes the run will use: with train.zero (DeepSpeed) or train.extra.fsdp the estimate is "
        "per rank, what they shard divided over N (default: 1)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
    p.set_defaults(func=cmd)


def ladder_plan(args: argparse.Namespace, device: str | None) -> Any:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from nlptasks.plan import make_plan

    rungs = [r.strip() for r in args.rungs.split(",") if r.strip()] if getattr(args, "rungs", None) else None
    plan = make_plan(args.recipe, args.overrides, device=device, rungs=rungs, nproc=max(1, getattr(args, "nproc", 1)))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    return plan


def measure_rungs(args: argparse.Namespace, plan: Any, steps: int, timeout: float) -> dict[str, dict[str, Any]]:
    from nlptasks.plan.probe import measure

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


def measure_label(measured: dict[str, dict[str, Any]]) -> str:
    kinds = {m.get("measure", "") for m in measured.values() if m.get("peak") is not None}
    if any(k.startswith("cuda") for k in kinds):
        return "measured (CUDA max allocated)"
    return "measured (CPU peak RSS, not GPU memory)"


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    budget = None
    if args.gpu_mem:
        from nlptasks.plan import parse_size

        budget = parse_size(args.gpu_mem)
    device = None if args.device == "auto" else args.device
    if args.probe and device is not None:
        import torch

        here = "cuda" if torch.cuda.is_available() else "cpu"
        if device != here:
            raise NlptasksError(f"--probe measures on this machine ({here}); leave out --device {device} or --probe")
    plan = ladder_plan(args, device)
    measured = measure_rungs(args, plan, args.steps, 600.0) if args.probe else None
    from nlptasks.plan import choose, human, plan_text

    choice = choose(plan, budget) if budget is not None else None
    if args.json:
        payload = plan.to_json()
        if measured is not None:
            for rung in payload["rungs"]:
                rung["measured"] = measured.get(rung["name"])
        if budget is not None:
            payload["budget"] = budget
            payload["choice"] = (
                {
                    "rung": choice.row.rung.name,
                    "micro_batch": choice.micro_batch,
                    "accumulation": choice.accumulation,
                    "estimate": choice.estimate.to_json(),
                    "overrides": choice.overrides(),
                }
                if choice
                else None
            )
        print(json.dumps(payload, ensure_ascii=False, indent=2))
        return 0
    print(
        f"plan {args.recipe}: {plan.model_class}, effective batch {plan.effective_batch}, estimated for {plan.device}"
    )
    first = next((row.settings for row in plan.rows if getattr(row, "settings", None) is not None), None)
    if first is not None and first.zero and first.ranks > 1:
        print(
            f"per rank: DeepSpeed ZeRO-{first.zero} over {first.ranks} processes (docs/plan.md#deepspeed-zero-per-rank)"
        )
    elif first is not None and first.shards > 1:
        print(f"per rank: FSDP over {first.shards} processes (docs/plan.md#fsdp-per-rank)")
    print(plan_text(plan, measured, measure_label(measured) if measured is not None else ""))
    if measured is not None and not any(
        k.startswith("cuda") for k in (m.get("measure", "") for m in measured.values())
    ):
        print(
            "measured on CPU: peak resident memory from model building to the end of training, minus the "
            "resident memory before it; it includes allocator and library overhead and is not GPU memory"
        )
    if budget is not None:
        if choice is None:
            smallest = min((r.estimate.total for r in plan.rows if r.estimate and not r.needs), default=None)
            print(f"\nno rung fits {human(budget)} on {plan.device} (smallest estimate {human(smallest)})")
            return 1
        sets = " ".join(f"--set {o}" for o in choice.overrides())
        print(
            f"\nfits {human(budget)}: {choice.row.rung.label.lstrip('+ ')} with micro-batch {choice.micro_batch} x "
            f"accumulation {choice.accumulation} (estimate {human(choice.estimate.total)})"
            + (f"; note: {choice.row.rung.changes}" if choice.row.rung.changes else "")
        )
        print(f"run: nlptasks run {args.recipe} {sets}".rstrip())
    return 0
