"""What masked-LM pretraining on unlabeled Chinese text gives the Chinese tasks: fine-tuned from an
``mlm`` run against from scratch, same recipe, same fine-tuning budget.

Issue 29, part 2.  In one invocation, on the machine as it is:

1. **The corpus**: the *training* texts of chnsenticorp (``text``), msra_ner (``tokens``, joined),
   lcqmc and simclue_pair (``text_a``, ``text_b``) and alpaca_zh (``instruction``, ``input``,
   ``output``) from ``../shared/data``, one text per line -- never a validation or test text; 1% of
   the lines (drawn with seed 0) are held out as the pretraining's own validation set.
2. **Pretraining**: ``nlptasks run recipes/bench/mlm-zh.toml`` on that corpus for
   ``--pretrain-minutes`` (probes of 10 and 60 steps measure the step time; ``train.max_steps`` is set from
   it, so the learning-rate schedule ends with the budget).
3. **Fine-tuning**, per task and seed, twice with one recipe: ``[model.scratch]`` of the same size
   (its vocabulary built from the task's training texts) and ``model.name_or_path`` = the mlm run
   (its encoder and vocabulary).  ChnSentiCorp (cls, accuracy), MSRA (ner, entity F1), LCQMC (pair,
   accuracy); rows and epochs per task from the options below, the same for both sides.

It prints test metrics per side and seed, the gain in points, the seed spread, and the issue's
goals (>= +3 points on each task, MSRA test F1 >= 0.80, ChnSentiCorp >= 0.88).  ``--docs`` writes
the table into block ``mlm_gain`` of docs/benchmarks.md.

    OMP_NUM_THREADS=2 python benchmarks/mlm_gain.py --seeds 42,1,11 --docs       # the measurement (45 min + 17 a seed)
    OMP_NUM_THREADS=2 python benchmarks/mlm_gain.py --pretrain-minutes 1 --cls-rows 300 --ner-rows 300 \\
        --pair-rows 300 --epochs 1 --docs --docs-file /tmp/benchmarks.md                 # smoke run
    python benchmarks/mlm_gain.py --corpus-only runs/corpus   # just write the corpus (recipes/bench/mlm-zh.toml reads it)

More seeds later, on the same pretraining: ``--work-dir W --mlm-run W/runs/mlm/mlm --reuse --seeds 42,1,11``
fine-tunes the seeds not yet there and reads the runs already finished in ``W`` with the same recipe.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import ROOT, setup, timed  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
MLM_RECIPE = ROOT / "recipes" / "bench" / "mlm-zh.toml"
SOURCES = {  # dataset → (training file, its text columns)
    "chnsenticorp": ("train.csv", ["text"]),
    "msra_ner": ("train.jsonl", ["tokens"]),
    "lcqmc": ("train.csv", ["text_a", "text_b"]),
    "simclue_pair": ("train.csv", ["text_a", "text_b"]),
    "alpaca_zh": ("train.jsonl", ["instruction", "input", "output"]),
}
TASKS = {  # name → (task, data folder, metric, options, train.batch_size, learning_rate)
    "chnsenticorp": ("cls", "chnsenticorp", "accuracy", {"text_column": "text", "label_column": "label"}, 32, 5e-4),
    "msra": ("ner", "msra_ner", "f1", {"tokens_column": "tokens", "tags_column": "tags", "scheme": "BIO"}, 32, 1e-3),
    "lcqmc": ("pair", "lcqmc", "accuracy", {"mode": "cross", "label_type": "classes"}, 32, 5e-4),
}
GOALS = {"gain": 3.0, "msra": 0.80, "chnsenticorp": 0.88}


def read_texts(path: Path, columns: list[str]) -> list[str]:
    """The non-blank texts of the columns of a csv/jsonl file (token lists joined without spaces)."""
    import csv

    rows: list[dict] = []
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh)) if path.suffix == ".csv" else [json.loads(line) for line in fh if line.strip()]
    texts = []
    for row in rows:
        for column in columns:
            value = row.get(column)
            if isinstance(value, list):
                value = "".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                texts.append(" ".join(value.split()))  # one line: newlines inside a text become spaces
    return texts


def write_corpus(folder: Path) -> dict[str, int]:
    """``folder/zh-train.txt`` and ``folder/zh-validation.txt`` (1% of the lines, seed 0)."""
    folder.mkdir(parents=True, exist_ok=True)
    texts: list[str] = []
    counts = {}
    for name, (file, columns) in SOURCES.items():
        found = read_texts(SHARED / name / file, columns)
        counts[name] = len(found)
        texts += found
    random.Random(0).shuffle(texts)
    held = max(1, len(texts) // 100)
    (folder / "zh-validation.txt").write_text("\n".join(texts[:held]) + "\n", encoding="utf-8")
    (folder / "zh-train.txt").write_text("\n".join(texts[held:]) + "\n", encoding="utf-8")
    counts["lines"], counts["held_out"] = len(texts), held
    counts["characters"] = sum(map(len, texts))
    return counts


def scratch_table() -> dict:
    """The mlm recipe's ``[model.scratch]``: the fine-tuning recipes build the same model."""
    return tomllib.loads(MLM_RECIPE.read_text(encoding="utf-8"))["model"]["scratch"]


def toml_value(value: object) -> str:
    """``value`` written as TOML (a table inline, as ``[model.scratch]``'s ``extra``)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value, ensure_ascii=False)


def finetune_recipe(
    folder: Path, name: str, args: argparse.Namespace, seed: int, mlm_run: Path | None
) -> tuple[Path, bool]:
    """One task's recipe, the same for both sides but the model (scratch, or the mlm run), and
    whether the file was already there with the same text (a finished run of it can be reused)."""
    task, data, _, options, batch, lr = TASKS[name]
    rows = {"chnsenticorp": args.cls_rows, "msra": args.ner_rows, "lcqmc": args.pair_rows}[name]
    ext = "jsonl" if task == "ner" else "csv"
    lines = [f"task = {toml_value(task)}", f"seed = {seed}", "", "[data]"]
    lines += [
        f"{split} = {toml_value(str(SHARED / data / f'{split}.{ext}'))}" for split in ("train", "validation", "test")
    ]
    if rows:
        lines.append(f"max_train_rows = {rows}")
    lines += ["", "[model]", f"max_length = {args.max_length}"]
    if mlm_run is not None:
        lines.append(f"name_or_path = {toml_value(str(mlm_run))}")
    else:
        lines += ["", "[model.scratch]"] + [f"{k} = {toml_value(v)}" for k, v in scratch_table().items()]
    lines += [
        "",
        "[train]",
        f"epochs = {args.epochs}",
        f"batch_size = {batch}",
        f"learning_rate = {lr}",
        'precision = "fp32"',  # "auto" would train the mlm side (a loaded model) in bf16 and the scratch side in fp32
        "warmup = 0.1",
        "weight_decay = 0.01",
        "group_by_length = true",
        "logging_steps = 50",
        "",
        "[options]",
    ]
    lines += [f"{k} = {toml_value(v)}" for k, v in options.items()]
    path = folder / f"{name}-{'mlm' if mlm_run else 'scratch'}-{seed}.toml"
    text = "\n".join(lines) + "\n"
    same = path.exists() and path.read_text(encoding="utf-8") == text
    path.write_text(text, encoding="utf-8")
    return path, same


def nlptasks(*argv: str) -> list[str]:
    return [sys.executable, "-m", "nlptasks", "run", *map(str, argv), "--no-progress"]


def train_seconds(log: Path) -> float:
    found = re.findall(r"training done: ([0-9.]+) s", log.read_text(encoding="utf-8"))
    return float(found[-1]) if found else float("nan")


def run_dir_of(folder: Path, task: str, name: str) -> Path:
    return folder / task / name


def pretrain(args: argparse.Namespace, work: Path, env: dict[str, str]) -> tuple[Path, dict]:
    corpus = work / "corpus"
    counts = write_corpus(corpus)
    data = [
        "--set",
        f"data.train={corpus / 'zh-train.txt'}",
        "--set",
        f"data.validation={corpus / 'zh-validation.txt'}",
        "--set",
        f"data.test={corpus / 'zh-validation.txt'}",
        "--set",
        f"output.dir={work / 'runs'}",
        "--set",
        f"options.masking={args.masking}",
    ]
    # the step time from two probes: their difference leaves out what a run spends before its steps
    # settle (one 20-step probe read 0.50 s a step where the run then took 0.36)
    short, long = 10, 60
    seconds = {}
    for probe_steps in (short, long):
        probe_log = work / f"probe-{probe_steps}.log"
        run_name = f"probe-{probe_steps}"
        timed(
            nlptasks(
                MLM_RECIPE, *data, "--set", f"train.max_steps={probe_steps}", "--set", f"output.run_name={run_name}"
            ),
            probe_log,
            env,
        )
        history = json.loads((run_dir_of(work / "runs", "mlm", run_name) / "log_history.json").read_text("utf-8"))
        seconds[probe_steps] = next(e["train_runtime"] for e in history if "train_runtime" in e)  # to 0.1 ms
    per_step = max(seconds[long] - seconds[short], 1e-3) / (long - short)
    steps = max(long, int(args.pretrain_minutes * 60 / per_step))
    log = work / "pretrain.log"
    t = timed(
        nlptasks(MLM_RECIPE, *data, "--set", f"train.max_steps={steps}", "--set", "output.run_name=mlm"), log, env
    )
    run = run_dir_of(work / "runs", "mlm", "mlm")
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    info = {
        "corpus": counts,
        "steps": steps,
        "seconds": train_seconds(log),
        "wall": t["wall"],
        "perplexity": metrics["validation"]["perplexity"],
        "accuracy": metrics["validation"]["accuracy"],
        "masking": args.masking,
    }
    return run, info


def finetune(args: argparse.Namespace, work: Path, env: dict[str, str], mlm_run: Path) -> dict:
    results: dict = {}
    recipes = work / "recipes"
    recipes.mkdir(exist_ok=True)
    for name in args.tasks.split(","):
        task, _, metric, *_ = TASKS[name]
        for seed in args.seeds:
            sides = (("scratch", None), ("mlm", mlm_run)) if args.scratch else (("mlm", mlm_run),)
            for side, source in sides:
                recipe, same = finetune_recipe(recipes, name, args, seed, source)
                run_name = f"{name}-{side}-{seed}"
                log = work / f"{run_name}.log"
                done = run_dir_of(work / "runs", task, run_name) / "metrics.json"
                if args.reuse and same and done.exists() and log.exists():
                    print(f"  {name} {side} seed {seed}: reused (finished in {work} with this recipe)", flush=True)
                else:
                    timed(
                        nlptasks(
                            recipe, "--set", f"output.dir={work / 'runs'}", "--set", f"output.run_name={run_name}"
                        ),
                        log,
                        env,
                    )
                metrics = json.loads(done.read_text(encoding="utf-8"))
                results.setdefault(name, {}).setdefault(side, {})[seed] = {
                    "test": metrics["test"][metric],
                    "validation": metrics["validation"][metric],
                    "seconds": train_seconds(log),
                }
                print(f"  {name} {side} seed {seed}: test {metric} {metrics['test'][metric]:.4f}", flush=True)
    return results


def render(f: dict) -> str:
    p = f["pretrain"]
    c = p["corpus"]
    lines = [
        f"Pretraining corpus: the training texts of {', '.join(SOURCES)} ({c['lines']:,} lines, "
        f"{c['characters']:,} characters; {c['held_out']:,} lines held out as its validation set). "
        f"`recipes/bench/mlm-zh.toml` ({p['masking']} masking): {p['steps']:,} steps in {p['seconds']:,.0f} s "
        f"(budget {f['pretrain_minutes']:g} min), validation perplexity {p['perplexity']:.2f}, masked-token accuracy "
        f"{p['accuracy']:.4f}.",
        "",
        f"Fine-tuning, both sides the same recipe ({f['epochs']} epoch(s), max_length {f['max_length']}; training rows: "
        f"ChnSentiCorp {f['rows']['chnsenticorp'] or 'all'}, MSRA {f['rows']['msra'] or 'all'}, LCQMC "
        f"{f['rows']['lcqmc'] or 'all'}), seeds {', '.join(map(str, f['seeds']))}:",
        "",
        "| task (test metric) | from scratch | from the mlm run | gain (points) | training s (scratch / mlm) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, sides in f["results"].items():
        metric = TASKS[name][2]
        m = [v["test"] for v in sides["mlm"].values()]

        def cell(values: list[float]) -> str:
            mean = statistics.mean(values)
            return f"{mean:.4f}" + (f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else "")

        secs = [
            f"{statistics.mean(v['seconds'] for v in sides[k].values()):.0f}" if k in sides else "-"
            for k in ("scratch", "mlm")
        ]
        if "scratch" in sides:
            s = [v["test"] for v in sides["scratch"].values()]
            scratch, gain = cell(s), f"{100 * (statistics.mean(m) - statistics.mean(s)):+.1f}"
        else:
            scratch, gain = "(not run: --no-scratch)", "-"
        lines.append(f"| {name} ({metric}) | {scratch} | {cell(m)} | {gain} | {secs[0]} / {secs[1]} |")
    lines += [
        "",
        "Goals (issue 29): "
        + "; ".join(f"{k} {'**met**' if ok else '**not met**'} ({v})" for k, (ok, v) in goals(f).items())
        + ".",
    ]
    return "\n".join(lines)


def goals(f: dict) -> dict[str, tuple[bool, str]]:
    out = {}
    for name, sides in f["results"].items():
        m = statistics.mean(v["test"] for v in sides["mlm"].values())
        if "scratch" in sides:
            s = statistics.mean(v["test"] for v in sides["scratch"].values())
            out[f"{name} ≥ +3 points"] = (100 * (m - s) >= GOALS["gain"], f"{100 * (m - s):+.1f}")
        if name in GOALS:
            out[f"{name} ≥ {GOALS[name]}"] = (m >= GOALS[name], f"{m:.4f}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pretrain-minutes", type=float, default=45.0, help="pretraining budget in minutes (default 45)")
    p.add_argument(
        "--masking", choices=["span", "token"], default="token", help="the mlm run's masking (default token)"
    )
    p.add_argument("--tasks", default="chnsenticorp,msra,lcqmc", help="fine-tuned tasks (default all three)")
    p.add_argument(
        "--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[42], help="fine-tuning seeds, e.g. 42,1,11"
    )
    p.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs (default 3)")
    p.add_argument("--max-length", type=int, default=128, help="fine-tuning model.max_length (default 128)")
    p.add_argument("--cls-rows", type=int, default=0, help="ChnSentiCorp training rows (default 0: all 6,212)")
    p.add_argument("--ner-rows", type=int, default=0, help="MSRA training sentences (default 0: all 20,000)")
    p.add_argument("--pair-rows", type=int, default=0, help="LCQMC training pairs (default 0: all 7,041)")
    p.add_argument("--mlm-run", type=Path, help="fine-tune from this mlm run instead of pretraining one")
    p.add_argument(
        "--no-scratch",
        dest="scratch",
        action="store_false",
        help="fine-tune from the mlm run only (to compare pretraining choices: --masking span; block mlm_gain-span)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="with --work-dir W and --mlm-run W/runs/mlm/mlm: fine-tuning runs that finished in W with the same "
        "recipe are read, not run again (a stopped benchmark goes on; more --seeds add to the earlier ones)",
    )
    p.add_argument("--corpus-only", type=Path, metavar="DIR", help="write the corpus into DIR and stop")
    p.add_argument("--work-dir", type=Path, help="where runs and logs go (default: a new temporary folder)")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    _docs.add_arguments(p)
    args = p.parse_args(argv)
    if args.reuse and not (args.mlm_run and args.work_dir):
        # without --mlm-run the run would pretrain again into the same folder, and its earlier
        # fine-tuning runs, whose recipes name the same path, would be read as if from the new one
        p.error("--reuse goes on from one pretraining: give --work-dir W and --mlm-run W/runs/mlm/mlm")
    if args.corpus_only:
        print(json.dumps(write_corpus(args.corpus_only)))
        return 0
    info = _docs.start(__file__, argv)
    _, work = setup(None, args.work_dir, "mlm-gain-")
    env = {**os.environ}
    if args.mlm_run:
        mlm_run, pre = args.mlm_run.resolve(), json.loads((args.mlm_run / "pretrain.json").read_text(encoding="utf-8"))
    else:
        mlm_run, pre = pretrain(args, work, env)
        (mlm_run / "pretrain.json").write_text(json.dumps(pre), encoding="utf-8")
    results = finetune(args, work, env, mlm_run)
    figures = {
        "pretrain": pre,
        "pretrain_minutes": args.pretrain_minutes,
        "results": results,
        "seeds": args.seeds,
        "epochs": args.epochs,
        "max_length": args.max_length,
        "rows": {"chnsenticorp": args.cls_rows, "msra": args.ner_rows, "lcqmc": args.pair_rows},
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    suffix = args.masking if args.masking != "token" else (None if args.scratch else "no-scratch")
    _docs.publish(args, _docs.block_name(__file__, suffix), info, render(figures))
    return 0 if all(ok for ok, _ in goals(figures).values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
