"""TRL's ``DPOTrainer`` on conversational preference pairs: the peer of benchmarks/dpo_trl.py.

Tunes a local causal LM folder (``--base``: weights, tokenizer and its chat template) the way TRL's
documentation shows it: the pairs as they are (``prompt`` turns, ``chosen`` and ``rejected``
assistant turns), a ``peft_config`` (LoRA on every linear layer of the decoder blocks, TRL makes the
``PeftModel`` and takes the reference by switching the adapter off), ``DPOConfig`` with TRL's
defaults unless an option says otherwise (``--no-gradient-checkpointing``, fp32 on the CPU).
After training it saves the adapter in ``--output-dir``/final and writes a JSON: the Trainer's
runtime, pairs trained per second, steps and the mean training loss.

    python benchmarks/trl_dpo.py --base start/ --train train.jsonl --out trl.json
"""

import argparse
import json
import os
import time

# Not a benchmark itself but the peer side of one (benchmarks/_docs.py).
PEER_OF = "dpo_trl.py"

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import load_dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import DPOConfig, DPOTrainer  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="model folder (weights, tokenizer with a chat template)")
    p.add_argument("--train", required=True)
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=1024, help="TRL's default 1024")
    p.add_argument("--lr", type=float, default=1e-6, help="TRL's default 1e-6")
    p.add_argument("--warmup", type=float, default=0.0)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=int, default=32)
    p.add_argument("--no-gradient-checkpointing", action="store_true", help="TRL turns it on by default")
    p.add_argument("--precompute-ref-log-probs", action="store_true", help="TRL's default: off")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--output-dir", default="/tmp/trl_dpo_trainer")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    data = load_dataset("json", data_files={"train": args.train})["train"]
    tokenizer = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForCausalLM.from_pretrained(args.base)
    config = DPOConfig(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=args.warmup,
        beta=args.beta,
        max_length=args.max_length,
        precompute_ref_log_probs=args.precompute_ref_log_probs,
        gradient_checkpointing=not args.no_gradient_checkpointing,
        bf16=False,
        save_strategy="no",
        logging_steps=10_000,
        report_to="none",
        seed=args.seed,
        dataloader_num_workers=0,
        use_cpu=True,
    )
    lora = LoraConfig(
        r=args.r, lora_alpha=args.alpha, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    started = time.perf_counter()
    trainer = DPOTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=lora)
    setup = time.perf_counter() - started  # tokenization (and the reference pass when asked)
    out = trainer.train()
    runtime = out.metrics["train_runtime"]
    trainer.save_model(os.path.join(args.output_dir, "final"))
    pairs = len(trainer.train_dataset)
    result = {
        "train_runtime": runtime,
        "setup_seconds": setup,
        "steps": out.global_step,
        "pairs": pairs,
        "pairs_per_second": pairs * args.epochs / runtime,
        "train_loss": out.metrics["train_loss"],
        "gradient_checkpointing": not args.no_gradient_checkpointing,
    }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
