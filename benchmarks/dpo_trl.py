"""dpo vs a plain TRL script: the same chat model, dpo_zh pairs, LoRA and settings (issue 30).

The script first makes the model both sides start from, as a user would: ``nlptasks run`` of an sft
recipe (written next to the runs, shown in the log) that builds a qwen2-style decoder and a
byte-level BPE vocabulary from ``alpaca_zh``'s training rows and trains every weight (ChatML): its
run folder is a plain transformers model with its tokenizer and template.  Then, each in a fresh process, with
the same pairs (``dpo_zh`` train), epochs, batch, learning rate, warmup, beta, sigmoid loss, maximum
length, LoRA (rank, alpha, every linear layer, no dropout) and seed:

* ``benchmarks/trl_dpo.py``: TRL's ``DPOTrainer`` with a ``peft_config``, twice: TRL's defaults
  (gradient checkpointing on; the reference run beside every step) and without checkpointing;
* ``nlptasks run`` of a dpo recipe, twice: as shipped (``options.precompute_reference = true``: one
  reference pass before training, timed and added to the training time) and with the reference run
  beside every step, as TRL does by default.

Printed per side: pairs trained per second (pairs x epochs over the training time, the reference
pass included where there is one), the mean training loss, and on ``dpo_zh``'s test pairs, scored
by this script the same way for every side (the start's tokenizer and template; an answer ends with
the end-of-turn marker): the DPO loss, reward accuracy and margin, and the share of pairs the model
ranks right (mean log-probability per token of the chosen answer above the rejected one's), also
for the start model.  Goal: **≥ 1x TRL's pairs/s** at a training loss no worse than TRL's + 0.02.

    OMP_NUM_THREADS=2 python benchmarks/dpo_trl.py --threads 2 --docs
    python benchmarks/dpo_trl.py --sft-rows 64 --train-rows 32 --docs --docs-file /tmp/b.md   # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
GOAL = 1.0
LOSS_TOLERANCE = 0.02
# (key, label in the table, kind)
SIDES = [
    ("trl", "TRL `DPOTrainer`, its defaults (gradient checkpointing; reference beside each step)", "trl"),
    ("trl_no_gc", "TRL `DPOTrainer`, `gradient_checkpointing=False`", "trl_no_gc"),
    ("ours_beside", "`nlptasks run`, `options.precompute_reference = false` (as TRL)", "ours_beside"),
    ("ours", "`nlptasks run`, as shipped (one reference pass first, counted)", "ours"),
]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import _docs  # noqa: E402
import _harness  # noqa: E402
from _harness import setup, timed, versions  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=SHARED / "dpo_zh", help="train.jsonl and test.jsonl pairs")
    p.add_argument("--sft-dir", type=Path, default=SHARED / "alpaca_zh", help="the start's sft rows")
    p.add_argument("--sft-rows", type=int, default=None, help="first N sft rows (default: all)")
    p.add_argument("--sft-epochs", type=float, default=3)
    p.add_argument("--train-rows", type=int, default=None, help="first N pairs (default: all)")
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=float, default=0.05)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=int, default=32)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
    p.add_argument("--start", type=Path, help="an sft run folder to start from (default: trained here first)")
    p.add_argument("--sides", default=",".join(k for k, *_ in SIDES), help="which sides to run (default: all four)")
    p.add_argument("--compete", type=int, default=0, metavar="N", help=_harness.COMPETE_HELP)
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--json", type=Path)
    _docs.add_arguments(p)
    return p.parse_args(argv)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def sft_recipe(args: argparse.Namespace, work: Path) -> Path:
    data = args.sft_dir.resolve()
    return write(
        work / "start.toml",
        [
            'task = "sft"',
            f"seed = {args.seed}",
            "[data]",
            f"train = {json.dumps(str(data / 'train.jsonl'))}",
            f"validation = {json.dumps(str(data / 'validation.jsonl'))}",
            *([f"max_train_rows = {args.sft_rows}"] if args.sft_rows else []),
            "max_eval_rows = 64",
            "[model]",
            f"max_length = {args.max_length}",
            "[model.scratch]",
            'architecture = "qwen2"',
            'tokenizer = "bpe"',
            "vocab_size = 4000",
            "layers = 2",
            "hidden = 256",
            "heads = 4",
            "intermediate = 1024",
            "[train]",
            f"epochs = {args.sft_epochs}",
            "batch_size = 16",
            "learning_rate = 1e-3",
            "warmup = 0.05",
            'eval_strategy = "no"',
            "[options]",
            'no_response = "drop"',
            "[output]",
            f"dir = {json.dumps(str(work / 'runs'))}",
            'run_name = "start"',
            "overwrite = true",
        ],
    )


def dpo_recipe(args: argparse.Namespace, start: Path, train: Path, work: Path, name: str, precompute: bool) -> Path:
    return write(
        work / f"{name}.toml",
        [
            'task = "dpo"',
            f"seed = {args.seed}",
            "[data]",
            f"train = {json.dumps(str(train.resolve()))}",
            # named, so that no split is carved out of train: every side trains on the same pairs
            f"validation = {json.dumps(str((args.data_dir / 'validation.jsonl').resolve()))}",
            f"test = {json.dumps(str((args.data_dir / 'test.jsonl').resolve()))}",
            "[model]",
            f"name_or_path = {json.dumps(str(start))}",
            f"max_length = {args.max_length}",
            "[train]",
            f"epochs = {args.epochs}",
            f"batch_size = {args.batch_size}",
            f"learning_rate = {args.lr}",
            f"warmup = {args.warmup}",
            'eval_strategy = "no"',
            "logging_steps = 10000",
            "[peft]",
            'method = "lora"',
            f"r = {args.r}",
            f"alpha = {args.alpha}",
            "dropout = 0.0",
            'target_modules = "all-linear"',
            "[options]",
            f"beta = {args.beta}",
            'loss_type = "sigmoid"',
            f"precompute_reference = {str(precompute).lower()}",
            'template = "tokenizer"',
            'no_response = "drop"',
            "[output]",
            f"dir = {json.dumps(str(work / 'runs'))}",
            f"run_name = {json.dumps(name)}",
            "overwrite = true",
        ],
    )


def read_pairs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_figures(start: Path, adapter: Path | None, pairs: list[dict], max_length: int, beta: float) -> dict:
    """DPO loss, reward accuracy and margin, and the share ranked right on ``pairs``, the policy
    being ``start`` with the adapter in ``adapter`` (``None``: the start itself)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from plugins.dpo import DpoOptions
    from plugins.dpo.data import to_pair
    from plugins.dpo.pairs import tokenize_pair

    tokenizer = AutoTokenizer.from_pretrained(start)
    reference = AutoModelForCausalLM.from_pretrained(start).eval()
    policy = reference
    if adapter is not None:
        policy = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(start), adapter).eval()

    def logps(model, prompt_ids: list[int], answer: list[int]) -> float:
        ids = torch.tensor([prompt_ids + answer])
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits[0, len(prompt_ids) - 1 : -1].float()
        return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(answer)[:, None]).sum())

    opts = DpoOptions()
    losses, right, margins, ranked = [], 0, [], 0
    for row in pairs:
        prompt, chosen, rejected = to_pair(row, "conversational", opts)
        prompt_ids, chosen_ids, rejected_ids = tokenize_pair(tokenizer, prompt, (chosen, rejected))
        room = max_length - len(prompt_ids)
        if room < 1:
            continue
        chosen_ids, rejected_ids = chosen_ids[:room], rejected_ids[:room]
        pc, pr = logps(policy, prompt_ids, chosen_ids), logps(policy, prompt_ids, rejected_ids)
        rc, rr = logps(reference, prompt_ids, chosen_ids), logps(reference, prompt_ids, rejected_ids)
        margin = beta * ((pc - rc) - (pr - rr))
        losses.append(-math.log(1 / (1 + math.exp(-margin))))
        margins.append(margin)
        right += margin > 0
        ranked += pc / len(chosen_ids) > pr / len(rejected_ids)
    n = len(losses)
    return {
        "pairs": n,
        "loss": sum(losses) / n,
        "reward_accuracy": right / n,
        "reward_margin": sum(margins) / n,
        "ranked_right": ranked / n,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    info = _docs.start(__file__, argv)
    _, work = setup(None, args.work_dir, "dpo_trl_")
    env = dict(os.environ)
    train = args.data_dir / "train.jsonl"
    if not train.exists():
        sys.exit(f"no {train}: pass --data-dir")
    if args.train_rows:  # the same first rows for every side
        train = write(work / "train-subset.jsonl", train.read_text(encoding="utf-8").splitlines()[: args.train_rows])
    nlptasks = [sys.executable, "-m", "nlptasks"]
    start = args.start or work / "runs" / "sft" / "start"  # every weight trained: a plain transformers folder
    if args.start is None:
        timed([*nlptasks, "run", str(sft_recipe(args, work)), "--no-progress"], work / "start.log", env)
    test = read_pairs(args.data_dir / "test.jsonl")
    results: dict[str, dict] = {"start": test_figures(start, None, test, args.max_length, args.beta)}
    print("start:", results["start"], flush=True)
    chosen = args.sides.split(",")
    with _harness.competing_jobs(args.compete):
        for key, _, kind in SIDES:
            if key in chosen:
                results[key] = run_side(args, key, kind, start, train, test, work, env)
    figures = {
        "command": info.command,
        "threads": args.threads,
        "compete": args.compete,
        "args": {k: str(v) for k, v in vars(args).items()},
        "versions": versions("trl", "peft"),
        "results": results,
    }
    block = _docs.block_name(__file__, "busy" if args.compete else None)
    _docs.publish(args, block, info, render(figures), intro(figures, args))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if goal_met(figures) else 1


def run_side(
    args: argparse.Namespace, key: str, kind: str, start: Path, train: Path, test: list[dict], work: Path, env: dict
) -> dict:
    """Train one side in a fresh process; its speed, training loss and test figures."""
    nlptasks = [sys.executable, "-m", "nlptasks"]
    if kind.startswith("trl"):
        out, folder = work / f"{key}.json", work / f"{key}_trainer"
        cmd = [
            sys.executable,
            str(ROOT / "benchmarks" / "trl_dpo.py"),
            "--base", str(start), "--train", str(train),
            "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
            "--max-length", str(args.max_length), "--lr", str(args.lr), "--warmup", str(args.warmup),
            "--beta", str(args.beta), "--r", str(args.r), "--alpha", str(args.alpha), "--seed", str(args.seed),
            *(["--no-gradient-checkpointing"] if kind == "trl_no_gc" else []),
            "--out", str(out), "--output-dir", str(folder),
        ]  # fmt: skip
        t = timed(cmd, work / f"{key}.log", env)
        side = json.loads(out.read_text(encoding="utf-8"))
        adapter = folder / "final"
        side["seconds"] = side["train_runtime"]
    else:
        recipe = dpo_recipe(args, start, train, work, key, precompute=kind == "ours")
        t = timed([*nlptasks, "run", str(recipe), "--no-progress"], work / f"{key}.log", env)
        adapter = work / "runs" / "dpo" / key
        m = json.loads((adapter / "metrics.json").read_text(encoding="utf-8"))["train"]
        pairs = json.loads((adapter / "nlptasks.json").read_text(encoding="utf-8"))["data"]["examples"]["train"]
        seconds = m["runtime"] + m.get("reference_seconds", 0.0)
        side = {
            "train_runtime": m["runtime"],
            "reference_seconds": m.get("reference_seconds", 0.0),
            "seconds": seconds,
            "steps": m["steps"],
            "pairs": pairs,
            "pairs_per_second": pairs * args.epochs / seconds,
            "train_loss": m["loss"],
        }
    side["wall"] = t["wall"]
    side["test"] = test_figures(start, adapter, test, args.max_length, args.beta)
    print(key, json.dumps(side), flush=True)
    return side


def goal_met(f: dict) -> bool:
    """≥ GOAL x the pairs/s of both TRL sides, at a training loss within LOSS_TOLERANCE of TRL's."""
    r = f["results"]
    ours = r.get("ours")
    peers = [r[k] for k in ("trl", "trl_no_gc") if k in r]
    if ours is None or not peers:
        return False
    faster = all(ours["pairs_per_second"] >= GOAL * p["pairs_per_second"] for p in peers)
    return faster and ours["train_loss"] <= min(p["train_loss"] for p in peers) + LOSS_TOLERANCE


def intro(f: dict, args: argparse.Namespace) -> str:
    pairs = f"the first {args.train_rows}" if args.train_rows else "all"
    busy = f" {f['compete']} CPU-bound job(s) ran beside every side;" if f.get("compete") else ""
    return (
        f"{f['threads']} torch threads on every side;{busy} the start: a qwen2-style decoder (2 layers, hidden 256) and a "
        f"byte-level BPE vocabulary of 4,000 tokens built from `{args.sft_dir.name}`'s training rows, trained on them "
        f"by `nlptasks run` ({args.sft_epochs:g} epochs, every weight, ChatML); then {pairs} pairs of "
        f"`{args.data_dir.name}` train, {args.epochs:g} epochs, batch {args.batch_size}, learning rate {args.lr:g}, "
        f"warmup {args.warmup:g}, beta {args.beta:g}, sigmoid loss, max length {args.max_length}, LoRA r {args.r} "
        f"alpha {args.alpha} on every linear layer, seed {args.seed}; test figures on `{args.data_dir.name}`'s "
        f"{f['results']['start']['pairs']} test pairs, computed by the script for every side; "
        f"trl {f['versions'].get('trl')}, peft {f['versions'].get('peft')}, transformers "
        f"{f['versions'].get('transformers')}."
    )


def render(f: dict) -> str:
    r = f["results"]
    first = next(k for k, *_ in SIDES if k in r)
    ref = r[first]["pairs_per_second"]
    s = r["start"]
    lines = [
        f"| side | pairs | steps | training s (reference pass) | pairs/s | vs {'TRL defaults' if first == 'trl' else 'TRL, no checkpointing'} | train loss "
        "| test loss | test reward acc. | test margin | test ranked right |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| the start (before DPO) | | | | | | | {s['loss']:.4f} | - (rewards 0) | 0 | {s['ranked_right']:.3f} |",
    ]
    for key, label, _ in SIDES:
        if key not in r:
            continue
        x, t = r[key], r[key]["test"]
        bold = "**" if key == "ours" else ""
        pre = f" ({x['reference_seconds']:.1f})" if x.get("reference_seconds") else ""
        lines.append(
            f"| {label} | {x['pairs']} | {x['steps']} | {x['seconds']:.1f}{pre} | {x['pairs_per_second']:.2f} | "
            f"{bold}{x['pairs_per_second'] / ref:.2f}x{bold} | {x['train_loss']:.4f} | {t['loss']:.4f} | "
            f"{t['reward_accuracy']:.3f} | {t['reward_margin']:.3f} | {t['ranked_right']:.3f} |"
        )
    ours, trl = r.get("ours"), r.get("trl_no_gc")
    if ours and trl:
        lines += [
            "",
            f"nlptasks as shipped vs TRL without checkpointing: **{ours['pairs_per_second'] / trl['pairs_per_second']:.2f}x** "
            f"pairs/s, training loss {ours['train_loss'] - trl['train_loss']:+.4f}.",
        ]
    lines += [
        "",
        f"Goal (≥ {GOAL:g}x TRL's pairs/s, with and without its checkpointing, at a training loss no more than "
        f"{LOSS_TOLERANCE} above TRL's): " + ("**met**" if goal_met(f) else "**not met**") + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
