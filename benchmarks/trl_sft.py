"""TRL's ``SFTTrainer`` on alpaca-shaped rows: the peer of benchmarks/sft_trl.py.

Fine-tunes a local causal LM folder (``--base``: weights, tokenizer and its chat template) the way
TRL's documentation shows it: a conversational *prompt-completion* dataset (the loss on the
completion only, TRL's default for that shape), ``packing=True`` (TRL's default strategy, best-fit
decreasing into ``--max-length`` sequences, padding-free), TRL's other defaults unless an option
says otherwise (``--no-gradient-checkpointing``, ``--precision fp32``).  After training it
evaluates the validation rows (packed the same way), saves the model in ``--output-dir``/final and
writes a JSON: the Trainer's runtime,
the tokens trained (the packed sequences' tokens times the epochs), tokens/s, steps and the
validation loss.

A row ``{"instruction", "input", "output"}`` becomes the user turn ``instruction + "\\n\\n" +
input`` (just the instruction when ``input`` is empty) and the assistant turn ``output``.

    python benchmarks/trl_sft.py --base base/ --train train.jsonl --validation validation.jsonl --out trl.json
"""

import argparse
import json
import os
import time

# Not a benchmark itself but the peer side of one (benchmarks/_docs.py).
PEER_OF = "sft_trl.py"

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import load_dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402


def to_prompt_completion(row: dict) -> dict:
    extra = (row.get("input") or "").strip()
    user = f"{row['instruction']}\n\n{extra}" if extra else row["instruction"]
    return {
        "prompt": [{"role": "user", "content": user}],
        "completion": [{"role": "assistant", "content": row["output"]}],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="model folder (weights, tokenizer with a chat template)")
    p.add_argument("--train", required=True)
    p.add_argument("--validation", required=True)
    p.add_argument("--train-rows", type=int, default=None)
    p.add_argument("--eval-rows", type=int, default=None)
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--batch-size", type=int, default=8, help="packed sequences per step (TRL's default 8)")
    p.add_argument("--max-length", type=int, default=1024, help="packed sequence length (TRL's default 1024)")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--warmup", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="TRL's default: bf16")
    p.add_argument("--no-gradient-checkpointing", action="store_true", help="TRL turns it on by default")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--output-dir", default="/tmp/trl_sft_trainer")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    raw = load_dataset("json", data_files={"train": args.train, "validation": args.validation})
    for split, rows in (("train", args.train_rows), ("validation", args.eval_rows)):
        if rows:
            raw[split] = raw[split].select(range(min(rows, len(raw[split]))))
    data = raw.map(to_prompt_completion, remove_columns=raw["train"].column_names)

    tokenizer = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForCausalLM.from_pretrained(args.base)
    config = SFTConfig(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=args.warmup,
        weight_decay=args.weight_decay,
        max_length=args.max_length,
        packing=True,
        bf16=args.precision == "bf16",
        gradient_checkpointing=not args.no_gradient_checkpointing,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=10_000,
        report_to="none",
        seed=args.seed,
        dataloader_num_workers=0,
        use_cpu=True,  # else TRL's default bf16=True refuses to start on a machine without a GPU
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        processing_class=tokenizer,
    )
    packed = trainer.train_dataset
    tokens_per_epoch = sum(len(ids) for ids in packed["input_ids"])
    supervised = None
    if "labels" in packed.column_names:
        supervised = sum(sum(1 for x in labels if x != -100) for labels in packed["labels"])
    started = time.perf_counter()
    out = trainer.train()
    wall_train = time.perf_counter() - started
    runtime = out.metrics["train_runtime"]
    evaluation = trainer.evaluate()
    trainer.save_model(os.path.join(args.output_dir, "final"))
    result = {
        "train_runtime": runtime,
        "train_wall": wall_train,
        "steps": out.global_step,
        "packed_sequences": len(packed),
        "tokens": tokens_per_epoch * args.epochs,
        "supervised_tokens_per_epoch": supervised,
        "tokens_per_second": tokens_per_epoch * args.epochs / runtime,
        "train_samples_per_second": out.metrics["train_samples_per_second"],
        "train_loss": out.metrics["train_loss"],
        "validation_loss": evaluation["eval_loss"],
        "examples": len(data["train"]),
        "precision": args.precision,
        "gradient_checkpointing": not args.no_gradient_checkpointing,
    }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
