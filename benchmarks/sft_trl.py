"""sft vs TRL's SFTTrainer: the same small decoder, alpaca_zh rows, loss on completions, packing (issue 21).

The script first builds one base model folder that both sides start from: a byte-level BPE
vocabulary built from the training rows (nlptasks' own builder, ``--vocab-size`` tokens, ChatML turn
markers, the ChatML template set on the tokenizer) and a qwen2-style decoder from random weights
(``--layers``, ``--hidden``, ``--heads``, ``--intermediate``), saved with ``save_pretrained``.
Then, each in a fresh process, with the same rows, epochs, learning rate, warmup, weight decay,
maximum length and seed:

* ``benchmarks/trl_sft.py``: TRL's ``SFTTrainer`` on a conversational prompt-completion dataset
  (the loss on the completion only), ``packing=True`` (best-fit decreasing into ``--max-length``
  sequences, padding-free), twice: with TRL's defaults (bf16, gradient checkpointing on) and with
  gradient checkpointing off (what nlptasks does);
* ``nlptasks run`` of a recipe written next to the base (shown in the log): every weight trained,
  ``options.packing = true`` (each micro-batch of ``--batch-size`` examples as one padding-free
  sequence), the ChatML template of the tokenizer, ``train.precision = "auto"``.

TRL's batch is counted in packed sequences, ours in examples; the script gives TRL the number of
packed sequences per step that carries the same tokens as ``--batch-size`` examples on average, so
both take about the same number of optimizer steps. Printed per side: the Trainer's training
runtime, tokens trained (every token of the packed sequences), tokens/s, steps and the validation
loss (mean over completion tokens).  Goal: **≥ 1.3x TRL's tokens/s** at a validation loss no worse.

    OMP_NUM_THREADS=2 python benchmarks/sft_trl.py --threads 2 --docs
    python benchmarks/sft_trl.py --train-rows 64 --eval-rows 16 --docs --docs-file /tmp/b.md   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "alpaca_zh"
GOAL = 1.3
LOSS_TOLERANCE = 0.01
# (key, label in the table, kind, run for every seed or only the first)
SIDES = [
    ("trl", "TRL `SFTTrainer`, its defaults (bf16, gradient checkpointing), `packing=True`", "trl", False),
    ("trl_no_gc", "TRL `SFTTrainer`, `gradient_checkpointing=False`, `packing=True`", "trl_no_gc", True),
    (
        "ours_mask",
        '`nlptasks run`, packing, `optimize.attention = "sdpa"` (SDPA\'s dense block mask)',
        "ours_mask",
        False,
    ),
    ("ours", "`nlptasks run`, packing, as shipped (attention per example on the CPU)", "ours", True),
]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import _docs  # noqa: E402
from _harness import setup, timed, versions  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=DATA, help="folder with train.jsonl and validation.jsonl")
    p.add_argument("--train-rows", type=int, default=None, help="first N training rows (default: all)")
    p.add_argument("--eval-rows", type=int, default=None, help="first N validation rows (default: all)")
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--batch-size", type=int, default=16, help="examples per step on our side (default 16)")
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=float, default=0.05)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument(
        "--seeds",
        default="42,1,2",
        help="seeds; TRL without checkpointing and nlptasks as shipped run each, "
        "the other two sides the first only (default 42,1,2)",
    )
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--json", type=Path)
    _docs.add_arguments(p)
    return p.parse_args(argv)


def read_rows(path: Path, limit: int | None) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


def messages(row: dict) -> list[dict[str, str]]:
    """The conversation of a row as trl_sft.py builds it (nlptasks' alpaca shape: instruction, two
    newlines, input).  nlptasks also strips whitespace around the instruction and the output (2 of
    alpaca_zh's 1,515 rows have some), so on those rows the script's evaluation and TRL's training
    keep a space or newline that nlptasks' training does not."""
    extra = (row.get("input") or "").strip()
    user = f"{row['instruction']}\n\n{extra}" if extra else row["instruction"]
    return [{"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}]


def build_base(args: argparse.Namespace, rows: list[dict], folder: Path) -> dict:
    """The shared starting point: tokenizer (ChatML template) and a random qwen2-style decoder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from nlptasks.engine.data.tokenization import DECODER_SPECIALS, build_tokenizer
    from nlptasks.recipe.schema import ScratchConfig
    from plugins.sft.templates import choose_template

    scratch = ScratchConfig(architecture="qwen2", tokenizer="bpe", vocab_size=args.vocab_size)
    corpus = [" ".join(DECODER_SPECIALS)] + [m["content"] for row in rows for m in messages(row)]
    tokenizer = build_tokenizer(corpus, scratch, args.max_length, style="decoder")
    choose_template("chatml", tokenizer, scratch=True)
    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "qwen2",
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        intermediate_size=args.intermediate,
        max_position_embeddings=max(512, args.max_length + 2),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    lengths = [
        len(tokenizer(tokenizer.apply_chat_template(messages(row), tokenize=False))["input_ids"]) for row in rows
    ]
    lengths = [min(n, args.max_length) for n in lengths]
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab": len(tokenizer),
        "mean_tokens": sum(lengths) / len(lengths),
    }


def validation_loss(model_dir: Path, rows: list[dict], max_length: int) -> dict[str, float]:
    """The mean loss per supervised token of ``rows`` for the model in ``model_dir``, the same
    tokens for every side: the response and its end-of-turn marker (what nlptasks supervises and
    generation must produce), and also with the newline TRL's completion adds after the marker."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from plugins.sft.templates import loss_labels, supervised_spans

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    totals = {"response": [0.0, 0], "with_newline": [0.0, 0]}
    with torch.no_grad():
        for row in rows:
            text, spans = supervised_spans(tokenizer, messages(row))
            enc = tokenizer(
                text, return_offsets_mapping=True, add_special_tokens=False, truncation=True, max_length=max_length
            )
            ids = enc["input_ids"]
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")
            for name, cover in (("response", spans), ("with_newline", [(a, len(text)) for a, _ in spans])):
                labels = loss_labels(ids, enc["offset_mapping"], cover)[1:]
                keep = torch.tensor([x != -100 for x in labels])
                totals[name][0] += float(nll[keep].sum())
                totals[name][1] += int(keep.sum())
    return {name: total / max(count, 1) for name, (total, count) in totals.items()}


def write_recipe(args: argparse.Namespace, base: Path, work: Path, name: str, seed: int, attention: str) -> Path:
    data = args.data_dir.resolve()
    lines = [
        'task = "sft"',
        f"seed = {seed}",
        "",
        "[data]",
        f"train = {json.dumps(str(data / 'train.jsonl'))}",
        f"validation = {json.dumps(str(data / 'validation.jsonl'))}",
        *([f"max_train_rows = {args.train_rows}"] if args.train_rows else []),
        *([f"max_eval_rows = {args.eval_rows}"] if args.eval_rows else []),
        "",
        "[model]",
        f"name_or_path = {json.dumps(str(base))}",
        f"max_length = {args.max_length}",
        "",
        "[train]",
        f"epochs = {args.epochs}",
        f"batch_size = {args.batch_size}",
        f"learning_rate = {args.lr}",
        f"warmup = {args.warmup}",
        f"weight_decay = {args.weight_decay}",
        'eval_strategy = "no"',
        "logging_steps = 10000",
        "",
        "[optimize]",
        f'attention = "{attention}"',
        "",
        "[options]",
        'template = "tokenizer"',
        "packing = true",
        'no_response = "drop"',
        "",
        "[output]",
        f"dir = {json.dumps(str(work / 'runs'))}",
        f"run_name = {json.dumps(name)}",
        "overwrite = true",
        "",
    ]
    recipe = work / f"{name}.toml"
    recipe.write_text("\n".join(lines), encoding="utf-8")
    return recipe


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    info = _docs.start(__file__, argv)
    _, work = setup(None, args.work_dir, "sft_trl_")
    env = dict(os.environ)
    train, validation = args.data_dir / "train.jsonl", args.data_dir / "validation.jsonl"
    if not train.exists():
        sys.exit(f"no {train}: pass --data-dir")
    base = work / "base"
    shape = build_base(args, read_rows(train, args.train_rows), base)
    trl_batch = max(1, round(args.batch_size * shape["mean_tokens"] / args.max_length))
    print(
        f"base: {shape['parameters'] / 1e6:.2f} M parameters, vocabulary {shape['vocab']}, "
        f"{shape['mean_tokens']:.0f} tokens per example on average -> TRL batch {trl_batch} packed sequences",
        flush=True,
    )

    seeds = [int(x) for x in args.seeds.split(",")]
    common = [
        "--base",
        str(base),
        "--train",
        str(train),
        "--validation",
        str(validation),
        "--epochs",
        str(args.epochs),
        "--batch-size",
        str(trl_batch),
        "--max-length",
        str(args.max_length),
        "--lr",
        str(args.lr),
        "--warmup",
        str(args.warmup),
        "--weight-decay",
        str(args.weight_decay),
        *(["--train-rows", str(args.train_rows)] if args.train_rows else []),
        *(["--eval-rows", str(args.eval_rows)] if args.eval_rows else []),
    ]
    rows = read_rows(validation, args.eval_rows)
    runs: dict[str, list[dict]] = {key: [] for key, *_ in SIDES}
    for i, seed in enumerate(seeds):
        for key, _, kind, every_seed in SIDES:
            if i and not every_seed:
                continue
            name = f"{key}-{seed}"
            if kind.startswith("trl"):
                out, folder = work / f"{name}.json", work / f"{name}_trainer"
                cmd = [
                    sys.executable,
                    str(ROOT / "benchmarks" / "trl_sft.py"),
                    *common,
                    "--seed",
                    str(seed),
                    *(["--no-gradient-checkpointing"] if kind == "trl_no_gc" else []),
                    "--out",
                    str(out),
                    "--output-dir",
                    str(folder),
                ]
                t = timed(cmd, work / f"{name}.log", env)
                side = json.loads(out.read_text(encoding="utf-8"))
                folder = folder / "final"
            else:
                recipe = write_recipe(args, base, work, name, seed, "sdpa" if kind == "ours_mask" else "auto")
                t = timed(
                    [sys.executable, "-m", "nlptasks", "run", str(recipe), "--no-progress"], work / f"{name}.log", env
                )
                folder = work / "runs" / "sft" / name
                m = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
                manifest = json.loads((folder / "nlptasks.json").read_text(encoding="utf-8"))
                side = {
                    "train_runtime": m["train"]["runtime"],
                    "tokens": m["train"]["tokens"],
                    "tokens_per_second": m["train"]["tokens_per_second"],
                    "validation_loss": m["validation"]["loss"],
                    "steps": m["train"]["steps"],
                    "precision": manifest.get("precision"),
                    "attention": manifest.get("attention"),
                }
            same = validation_loss(folder, rows, args.max_length)
            runs[key].append(
                {
                    **side,
                    "seed": seed,
                    "wall": t["wall"],
                    "own_validation_loss": side["validation_loss"],
                    "validation_loss": same["response"],
                    "validation_loss_with_newline": same["with_newline"],
                }
            )
    figures = {
        "command": info.command,
        "threads": args.threads,
        "base": shape,
        "trl_batch": trl_batch,
        "seeds": seeds,
        "args": {k: str(v) for k, v in vars(args).items()},
        "versions": versions("trl", "accelerate"),
        "runs": runs,
        "summary": {key: summary(r) for key, r in runs.items()},
    }
    print(json.dumps(figures["summary"], indent=2))
    _docs.publish(args, _docs.block_name(__file__), info, render(figures), intro(figures, args))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if goal_met(figures) else 1


def summary(runs: list[dict]) -> dict:
    """Means over the seeds a side ran: tokens/s, steps, tokens, training time, validation loss."""
    mean = lambda key: sum(r[key] for r in runs) / len(runs)  # noqa: E731
    return {
        "seeds": len(runs),
        "tokens_per_second": mean("tokens_per_second"),
        "steps": mean("steps"),
        "tokens": mean("tokens"),
        "train_runtime": mean("train_runtime"),
        "wall": mean("wall"),
        "validation_loss": mean("validation_loss"),
        "losses": [r["validation_loss"] for r in runs],
        "own_validation_loss": mean("own_validation_loss"),
    }


def goal_met(f: dict) -> bool:
    """≥ GOAL x TRL's tokens/s (as users run it, and without checkpointing) at a mean validation
    loss within LOSS_TOLERANCE of TRL's over the same seeds."""
    s = f["summary"]
    ours = s["ours"]
    faster = all(ours["tokens_per_second"] >= GOAL * s[k]["tokens_per_second"] for k in ("trl", "trl_no_gc"))
    return faster and ours["validation_loss"] <= s["trl_no_gc"]["validation_loss"] + LOSS_TOLERANCE


def intro(f: dict, args: argparse.Namespace) -> str:
    b = f["base"]
    rows = f"the first {args.train_rows}" if args.train_rows else "all"
    return (
        f"{f['threads']} torch threads on both sides; a qwen2-style decoder from random weights "
        f"({args.layers} layers, hidden {args.hidden}, {b['parameters'] / 1e6:.2f} M parameters, byte-level BPE of "
        f"{b['vocab']:,} tokens), {rows} training rows of `{args.data_dir.name}` "
        f"({b['mean_tokens']:.0f} tokens per example on average), {args.epochs:g} epochs, learning rate {args.lr:g}, "
        f"max length {args.max_length}; every weight trained; our batch {args.batch_size} examples, TRL's "
        f"{f['trl_batch']} packed sequences of up to {args.max_length} tokens (the same tokens per step on average); "
        f"seeds {', '.join(map(str, f['seeds']))}; validation loss: the mean over the response tokens of "
        f"{'the first ' + str(args.eval_rows) if args.eval_rows else 'all the'} validation rows, computed by the script "
        f"the same way for every side; trl {f['versions'].get('trl')}, transformers {f['versions'].get('transformers')}."
    )


def render(f: dict) -> str:
    s = f["summary"]
    ref = s["trl"]["tokens_per_second"]
    lines = [
        "| side | seeds | steps | tokens trained | train time (s) | tokens/s | vs TRL defaults "
        "| validation loss (per seed) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label, *_ in SIDES:
        x = s[key]
        bold = "**" if key == "ours" else ""
        per_seed = ", ".join(f"{v:.4f}" for v in x["losses"])
        lines.append(
            f"| {label} | {x['seeds']} | {x['steps']:.0f} | {x['tokens']:,.0f} | {x['train_runtime']:.1f} | "
            f"{x['tokens_per_second']:,.0f} | {bold}{x['tokens_per_second'] / ref:.2f}x{bold} | "
            f"{x['validation_loss']:.4f} ({per_seed}) |"
        )
    ours, trl = s["ours"], s["trl_no_gc"]
    lines += [
        "",
        f"nlptasks vs TRL without checkpointing: **{ours['tokens_per_second'] / trl['tokens_per_second']:.2f}x** "
        f"tokens/s, validation loss {ours['validation_loss'] - trl['validation_loss']:+.4f} (mean over the seeds).",
        "",
        f"Goal (≥ {GOAL}x TRL's tokens/s, with and without its checkpointing, at a validation loss no worse "
        f"than {LOSS_TOLERANCE} above TRL's mean): " + ("**met**" if goal_met(f) else "**not met**") + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
