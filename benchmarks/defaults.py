"""Defaults vs defaults: the seed's plain Trainer script with transformers' defaults against
``nlptasks run`` with the shipped recipe (issue 21, benchmark 1).

What a user compares: their plain script, which sets the model, the data, the epochs, the batch
size and the learning rate and leaves everything else to transformers (dynamic padding, the
default optimizer ``adamw_torch_fused``, random batch order, fp32 on a CPU, no warmup or weight
decay), against our shipped recipe as it is (only the model folder, the data files and the
number of training rows given on the command line).  Same model, data, seed, epochs, batch size,
learning rate and max length on both sides.  Cases:

* ``sst2``: SST-2, MiniLM-L6, ``recipes/sst2-minilm.toml`` vs ``benchmarks/plain_cls.py``;
* ``conll2003``: CoNLL-2003, MiniLM-L6, ``recipes/conll2003-minilm.toml`` vs ``benchmarks/ner_plain.py``;
* ``chnsenticorp``: ChnSentiCorp with a char-level BERT from scratch, ``recipes/cls.toml`` on that
  data vs ``plain_cls.py`` starting from the same initial weights and vocabulary (nlptasks builds
  them and saves them after one step at learning rate 1e-12: the plain script cannot build a
  vocabulary itself).

Each case writes its own block (``defaults-sst2`` ...) of docs/benchmarks.md with ``--docs``.
For each case the nlptasks side also runs with each of its defaults turned back to
transformers' value (``--ablate``: ``train.precision=fp32``, ``train.group_by_length=false``,
``optimize.optimizer=adamw_torch``, and for ``ner`` ``options.packing=false``), so each default's
share of the gain is measured.  It prints
samples/s (the Trainer's ``train_samples_per_second``), the ratio to the plain script, the
validation and test metric and the change in points, and, for nlptasks, tokens/s and the padding
fraction it recorded.  Goal: **≥ 1.5x samples/s with the metric within 0.5 points**.  One run of
one epoch moves the metric by about a point from seed to seed (dropout, batch order), so
``--more-seeds 1,2`` also runs the plain script and the shipped recipe with those seeds and judges
the goal on the means.

    OMP_NUM_THREADS=2 python benchmarks/defaults.py --threads 2 --docs
    OMP_NUM_THREADS=2 python benchmarks/defaults.py --cases conll2003 --more-seeds 1,2 --threads 2 --docs
    python benchmarks/defaults.py --cases sst2 --train-rows 64 --eval-rows 64 --docs --docs-file /tmp/b.md   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import setup, timed  # noqa: E402

CASES = {
    "sst2": {
        "recipe": "sst2-minilm.toml",
        "plain": "plain_cls.py",
        "data": DATA / "sst2",
        "ext": "csv",
        "metric": "accuracy",
        "scratch": False,
        "rows": 4000,
    },
    "conll2003": {
        "recipe": "conll2003-minilm.toml",
        "plain": "ner_plain.py",
        "data": DATA / "conll2003",
        "ext": "jsonl",
        "metric": "f1",
        "scratch": False,
        "rows": 2000,
        "ablations": {"options.packing=false": "padded training batches instead of packed"},
    },
    "chnsenticorp": {
        "recipe": "cls.toml",
        "plain": "plain_cls.py",
        "data": DATA / "chnsenticorp",
        "ext": "csv",
        "metric": "accuracy",
        "scratch": True,
        "rows": 4000,
    },
}
ABLATIONS = {
    "train.precision=fp32": "fp32 instead of bf16 autocast",
    "train.group_by_length=false": "random batch order instead of length-grouped",
    "optimize.optimizer=adamw_torch": "unfused AdamW",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    p.add_argument("--train-rows", type=int, help="training rows of every case (default: each case's own)")
    p.add_argument("--eval-rows", type=int, help="first N validation and test rows (default: all)")
    p.add_argument(
        "--ablate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run nlptasks with each default turned back (default: on)",
    )
    p.add_argument(
        "--more-seeds",
        default="",
        metavar="S,S",
        help="also run the plain script and the shipped recipe with these seeds (the goal then uses "
        "the means over all seeds): e.g. 1,2",
    )
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--json", type=Path)
    _docs.add_arguments(p)
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    info = _docs.start(__file__, argv)
    model, work = setup(None, args.work_dir, "defaults_")
    figures = {"command": info.command, "threads": args.threads, "cases": {}}
    for name in args.cases:
        figures["cases"][name] = run_case(name, CASES[name], model, work / name, args)
        one = {**figures, "cases": {name: figures["cases"][name]}}  # one block per case: rerun one alone
        _docs.publish(args, _docs.block_name(__file__, name), info, render(one), intro(one))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if all(goal_met(c) for c in figures["cases"].values()) else 1


def _files(case: dict, work: Path, eval_rows: int | None) -> dict[str, Path]:
    """The case's train/validation/test files; validation and test cut to ``eval_rows``."""
    files = {}
    for split in ("train", "validation", "test"):
        path = case["data"] / f"{split}.{case['ext']}"
        if split != "train" and eval_rows:
            cut = work / f"{split}.{case['ext']}"
            with path.open(encoding="utf-8") as src, cut.open("w", encoding="utf-8") as dst:
                for i, line in enumerate(src):
                    if i >= eval_rows + (case["ext"] == "csv"):  # csv: the header and N rows
                        break
                    dst.write(line)
            path = cut
        files[split] = path.resolve()
    return files


def run_case(name: str, case: dict, model: str, work: Path, args: argparse.Namespace) -> dict:
    from nlptasks.pipeline import load_recipe

    work.mkdir(parents=True, exist_ok=True)
    files = _files(case, work, args.eval_rows)
    rows = args.train_rows or case["rows"]
    base = [f"data.{s}={json.dumps(str(f))}" for s, f in files.items()] + [
        f"data.max_train_rows={rows}",
        f"output.dir={json.dumps(str(work / 'runs'))}",
    ]
    if not case["scratch"]:
        base.append(f"model.name_or_path={json.dumps(model)}")
    recipe = load_recipe(ROOT / "recipes" / case["recipe"], base).recipe
    env = dict(os.environ)
    init = _initial_weights(case, base, work, env) if case["scratch"] else model
    t = recipe.train
    plain_out = work / "plain.json"
    plain_cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / case["plain"]),
        "--train",
        str(files["train"]),
        "--validation",
        str(files["validation"]),
        "--test",
        str(files["test"]),
        "--model",
        init,
        "--train-rows",
        str(rows),
        "--epochs",
        str(t.epochs),
        "--batch-size",
        str(t.batch_size),
        "--lr",
        str(t.learning_rate),
        "--max-length",
        str(recipe.model.max_length),
        "--seed",
        str(recipe.seed),
        "--optim",
        "adamw_torch_fused",  # TrainingArguments' default
        "--disable-tqdm",
        "--output-dir",
        str(work / "plain_trainer"),
        "--out",
        str(plain_out),
    ]
    times = timed(plain_cmd, work / "plain.log", env)
    plain = json.loads(plain_out.read_text(encoding="utf-8"))
    metric = case["metric"]
    sides = {
        "plain script, transformers' defaults": {
            "samples_per_second": plain["train_samples_per_second"],
            "validation": _plain(plain, "validation", metric),
            "test": _plain(plain, "test", metric),
            "wall": times["wall"],
        }
    }
    variants = {"nlptasks, shipped recipe": []}
    if args.ablate:
        variants.update(
            {f"nlptasks, {why}": [change] for change, why in {**ABLATIONS, **case.get("ablations", {})}.items()}
        )
    for label, changes in variants.items():
        tag = "ours" if not changes else changes[0].split("=")[0].split(".")[-1]
        cmd = [sys.executable, "-m", "nlptasks", "run", str(ROOT / "recipes" / case["recipe"]), "--no-progress"]
        for item in [*base, f"output.run_name={tag}", *changes]:
            cmd += ["--set", item]
        times = timed(cmd, work / f"{tag}.log", env)
        (metrics_file,) = (work / "runs").glob(f"*/{tag}/metrics.json")
        m = json.loads(metrics_file.read_text(encoding="utf-8"))
        train = m["train"]
        sides[label] = {
            "samples_per_second": train["samples_per_second"],
            "validation": m["validation"][metric],
            "test": (m.get("test") or {}).get(metric),
            "wall": times["wall"],
            "tokens_per_second": train.get("tokens_per_second"),
            "padding_fraction": train.get("padding_fraction"),
            "mfu": train.get("mfu"),
        }
    shipped = sides["nlptasks, shipped recipe"]
    seeds = {
        "plain": [{"seed": recipe.seed, **sides["plain script, transformers' defaults"]}],
        "nlptasks": [{"seed": recipe.seed, **shipped}],
    }
    for seed in [int(x) for x in args.more_seeds.split(",") if x.strip()]:
        out = work / f"plain-{seed}.json"
        cmd = [
            *plain_cmd[: plain_cmd.index("--seed")],
            "--seed",
            str(seed),
            *plain_cmd[plain_cmd.index("--seed") + 2 : plain_cmd.index("--output-dir")],
            "--output-dir",
            str(work / f"plain_trainer-{seed}"),
            "--out",
            str(out),
        ]
        times = timed(cmd, work / f"plain-{seed}.log", env)
        r = json.loads(out.read_text(encoding="utf-8"))
        seeds["plain"].append(
            {
                "seed": seed,
                "samples_per_second": r["train_samples_per_second"],
                "validation": _plain(r, "validation", metric),
                "test": _plain(r, "test", metric),
            }
        )
        cmd = [sys.executable, "-m", "nlptasks", "run", str(ROOT / "recipes" / case["recipe"]), "--no-progress"]
        for item in [*base, f"output.run_name=ours-{seed}", f"seed={seed}"]:
            cmd += ["--set", item]
        timed(cmd, work / f"ours-{seed}.log", env)
        (metrics_file,) = (work / "runs").glob(f"*/ours-{seed}/metrics.json")
        m = json.loads(metrics_file.read_text(encoding="utf-8"))
        seeds["nlptasks"].append(
            {
                "seed": seed,
                "samples_per_second": m["train"]["samples_per_second"],
                "validation": m["validation"][metric],
                "test": (m.get("test") or {}).get(metric),
            }
        )
    return {
        "metric": metric,
        "rows": rows,
        "epochs": t.epochs,
        "batch_size": t.batch_size,
        "recipe": case["recipe"],
        "sides": sides,
        "seeds": seeds,
    }


def _mean(runs: list[dict], key: str) -> float:
    return sum(r[key] for r in runs) / len(runs)


def _plain(result: dict, split: str, metric: str) -> float | None:
    """A figure of a plain script's JSON: ``{metric}_{split}`` (plain_cls.py) or ``{split: {metric}}`` (ner_plain.py)."""
    if f"{metric}_{split}" in result:
        return result[f"{metric}_{split}"]
    return (result.get(split) or {}).get(metric)


def _initial_weights(case: dict, base: list[str], work: Path, env: dict) -> str:
    """A from-scratch recipe's initial model (vocabulary built from the data, weights drawn from
    the seed) saved as a folder the plain script loads: one step at learning rate 1e-12."""
    cmd = [sys.executable, "-m", "nlptasks", "run", str(ROOT / "recipes" / case["recipe"]), "--no-progress"]
    for item in [
        *base,
        "output.run_name=init",
        "train.max_steps=1",
        "train.learning_rate=1e-12",
        "train.warmup=0",
        "train.eval_strategy=no",
        "train.keep_best=false",
    ]:
        cmd += ["--set", item]
    timed(cmd, work / "init.log", env)
    (folder,) = (work / "runs").glob("*/init")
    return str(folder)


def goal_met(case: dict) -> bool:
    """≥ 1.5x samples/s with the validation metric within 0.5 points: of the one run, or of the
    means over the seeds when several ran (``--more-seeds``)."""
    plain, ours = case["seeds"]["plain"], case["seeds"]["nlptasks"]
    return (
        _mean(ours, "samples_per_second") >= 1.5 * _mean(plain, "samples_per_second")
        and abs(_mean(ours, "validation") - _mean(plain, "validation")) <= 0.005
    )


def intro(f: dict) -> str:
    return (
        f"{f['threads']} torch threads on both sides. The plain script sets model, data, epochs, batch size, "
        "learning rate, max length and seed, nothing else; nlptasks runs the shipped recipe as it is. "
        "Samples/s as the Trainer reports them (evaluation during training included where the recipe "
        "evaluates)."
    )


def render(f: dict) -> str:
    lines = []
    for name, c in f["cases"].items():
        plain = c["sides"]["plain script, transformers' defaults"]
        m = c["metric"]
        lines += [
            f"**{name}** (`recipes/{c['recipe']}`, {c['rows']:,} training rows, {c['epochs']:g} epoch(s), "
            f"batch {c['batch_size']})",
            "",
            f"| side | samples/s | vs plain | validation {m} | test {m} | tokens/s | padding |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for label, s in c["sides"].items():
            ratio = s["samples_per_second"] / plain["samples_per_second"]
            gap = "" if s is plain else f" ({100 * (s['validation'] - plain['validation']):+.2f})"
            tgap = "" if s is plain or s["test"] is None else f" ({100 * (s['test'] - plain['test']):+.2f})"
            tokens = f"{s['tokens_per_second']:.0f}" if s.get("tokens_per_second") else "—"
            padding = f"{s['padding_fraction']:.1%}" if s.get("padding_fraction") is not None else "—"
            bold = "**" if label == "nlptasks, shipped recipe" else ""
            lines.append(
                f"| {label} | {s['samples_per_second']:.1f} | {bold}{ratio:.2f}x{bold} | "
                f"{s['validation']:.4f}{gap} | "
                + (f"{s['test']:.4f}{tgap}" if s["test"] is not None else "—")
                + f" | {tokens} | {padding} |"
            )
        plain_runs, ours_runs = c["seeds"]["plain"], c["seeds"]["nlptasks"]
        if len(ours_runs) > 1:
            lines += [
                "",
                f"Over {len(ours_runs)} seeds (plain script and shipped recipe each):",
                "",
                f"| seed | plain samples/s | nlptasks samples/s | plain validation {m} | nlptasks validation {m} "
                f"| plain test {m} | nlptasks test {m} |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for a, b in zip(plain_runs, ours_runs, strict=True):
                lines.append(
                    f"| {a['seed']} | {a['samples_per_second']:.1f} | {b['samples_per_second']:.1f} | "
                    f"{a['validation']:.4f} | {b['validation']:.4f} | {a['test']:.4f} | {b['test']:.4f} |"
                )
            ratio = _mean(ours_runs, "samples_per_second") / _mean(plain_runs, "samples_per_second")
            lines.append(
                f"| mean | {_mean(plain_runs, 'samples_per_second'):.1f} | "
                f"{_mean(ours_runs, 'samples_per_second'):.1f} (**{ratio:.2f}x**) | "
                f"{_mean(plain_runs, 'validation'):.4f} | {_mean(ours_runs, 'validation'):.4f} "
                f"({100 * (_mean(ours_runs, 'validation') - _mean(plain_runs, 'validation')):+.2f}) | "
                f"{_mean(plain_runs, 'test'):.4f} | {_mean(ours_runs, 'test'):.4f} "
                f"({100 * (_mean(ours_runs, 'test') - _mean(plain_runs, 'test')):+.2f}) |"
            )
        basis = f"means over {len(ours_runs)} seeds" if len(ours_runs) > 1 else "one run"
        lines += [
            "",
            f"Goal (≥ 1.5x samples/s, validation {m} within 0.5 points; {basis}): "
            + ("**met**" if goal_met(c) else "**not met**")
            + ".",
            "",
        ]
    return "\n".join(lines).rstrip()


if __name__ == "__main__":
    sys.exit(main())
