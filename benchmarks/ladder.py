"""Memory ladder: ``nlptasks bench ladder RECIPE`` as a subprocess, its table into the docs.

Runs ``python -m nlptasks bench ladder RECIPE --json`` (each rung of the ladder trained for
``--steps`` optimizer steps in a fresh process, inputs padded to ``model.max_length``; see
docs/plan.md) and turns its JSON into a Markdown table: strategy, what it targets, batch
(micro-batch x accumulation), the measured peak (CUDA max allocated on a GPU; on CPU the peak
resident memory, not GPU memory), the planner's estimate, seconds per step, samples/s and
seconds per epoch, or why a rung was skipped.

The default is what the CPU section of docs/benchmarks.md measured: the classic experiment's
recipe ``recipes/bench/ladder-macbert-large.toml`` with a small model (4 layers, hidden 256, 4
heads, feed-forward 1024: the overrides in ``SMALL``), 10 steps per rung.  ``--as-shipped`` leaves
the small-model overrides out (the macbert-large-shaped model: a GPU's job, e.g. ``--as-shipped
--steps 20``).  With ``--docs`` the table goes into the block ``ladder-<device>`` (``ladder-cpu``,
``ladder-cuda``) of docs/benchmarks.md, ``--docs-file`` for another file.

    OMP_NUM_THREADS=1 python benchmarks/ladder.py --docs      # the CPU section's table (several minutes)
Smoke check of the script itself (a minute or two):
    python benchmarks/ladder.py --steps 1 --rungs baseline,adafactor --set model.max_length=32 \\
        --docs --docs-file /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "bench" / "ladder-macbert-large.toml"
SMALL = [
    "model.scratch.layers=4",
    "model.scratch.hidden=256",
    "model.scratch.heads=4",
    "model.scratch.intermediate=1024",
]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "recipe", nargs="?", type=Path, default=RECIPE, help=f"recipe file (default {RECIPE.relative_to(ROOT)})"
    )
    p.add_argument("--steps", type=int, default=10, help="optimizer steps per rung (default 10)")
    p.add_argument("--rungs", help="only these rungs, comma-separated (e.g. baseline,accumulation)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per rung (default 600)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="further recipe overrides, after the small-model ones (repeatable)",
    )
    p.add_argument(
        "--as-shipped", action="store_true", help="leave out the small-model overrides (" + ", ".join(SMALL) + ")"
    )
    p.add_argument("--json", type=Path, help="write the ladder's JSON here")
    _docs.add_arguments(p)
    return p.parse_args(argv)


def ladder_command(args: argparse.Namespace) -> list[str]:
    """``python -m nlptasks bench ladder RECIPE --json ...`` for these arguments."""
    cmd = [
        sys.executable,
        "-m",
        "nlptasks",
        "bench",
        "ladder",
        str(args.recipe.resolve()),
        "--json",
        "--steps",
        str(args.steps),
        "--timeout",
        str(args.timeout),
    ]
    if args.rungs:
        cmd += ["--rungs", args.rungs]
    for item in [*([] if args.as_shipped else SMALL), *args.overrides]:
        cmd += ["--set", item]
    return cmd


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = _docs.start(__file__, argv)
    cmd = ladder_command(args)
    shown = "nlptasks " + " ".join(cmd[3:])
    print(f"$ {shown}", flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)  # stderr (notes, progress) passes through
    if proc.returncode != 0:
        print(proc.stdout, end="")
        return proc.returncode
    result = json.loads(proc.stdout)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    intro = (
        f"`{shown.replace(str(ROOT) + '/', '')}`: {result['model_class']}, {result['steps']} steps per rung on "
        f"{result['device']}, each rung a fresh process, inputs padded to `model.max_length`."
    )
    _docs.publish(args, _docs.block_name(__file__, result["device"]), info, render_table(result), intro)
    return 0


def render_table(result: dict[str, Any]) -> str:
    """One row per rung; the peak column says what was measured (GPU memory or CPU RSS)."""
    from nlptasks.plan import human

    kinds = {r["measure"] for r in result["rungs"] if r.get("peak") is not None}
    peak = "peak (CUDA max allocated)" if any(k.startswith("cuda") for k in kinds) else "peak (CPU RSS, not GPU memory)"
    lines = [
        f"| strategy | targets | batch | {peak} | estimate | s/step | samples/s | s/epoch |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rungs"]:
        batch = f"{r['micro_batch']}x{r['accumulation']}"
        if r.get("peak") is None:
            lines.append(
                f"| {r['strategy']} | {r['targets']} | {batch} | skipped: {r.get('skipped') or '-'} "
                f"| {human(r['estimate'])} | - | - | - |"
            )
            continue
        sps, rate, epoch = r["seconds_per_step"], r["samples_per_second"], r["epoch_seconds"]
        lines.append(
            f"| {r['strategy']} | {r['targets']} | {batch} | {human(r['peak'])} | {human(r['estimate'])} "
            f"| {f'{sps:.2f}' if sps else '-'} | {f'{rate:.1f}' if rate else '-'} "
            f"| {f'{epoch:.0f}' if epoch else '-'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
