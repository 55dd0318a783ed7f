#!/usr/bin/env python3
"""Build the GoEmotions multi-label subset in this folder from the official GoEmotions files.

Usage:
    python data/goemotions/make_subset.py SOURCE_DIR [--out OUT_DIR]

SOURCE_DIR holds the official "simplified" GoEmotions files, as in
https://github.com/google-research/google-research/tree/master/goemotions/data :
train.tsv, dev.tsv, test.tsv (no header; columns text, comma-separated emotion ids, comment id)
and emotions.txt (the 28 label names, one a line, in id order).

Rule: the first N rows of each official split, in file order (train -> train.jsonl N=3000,
dev -> validation.jsonl N=600, test -> test.jsonl N=1500).  Splits are never mixed.
Each output line is {"text": ..., "labels": [names]} (labels in id order, i.e. emotions.txt
order; "neutral" is one of the 28 labels, as in the official data), written with
json.dumps(..., ensure_ascii=False) and a "\n" line end, UTF-8.

The tsv files are read with Python's csv module (delimiter TAB, default double-quote handling),
as the Hugging Face "go_emotions" loader reads them: about 2.5% of the texts are written
CSV-quoted ("..." with inner quotes doubled) and are unquoted.  Texts are otherwise unchanged
(no stripping, "[NAME]"/"[RELIGION]" masks kept).

The source files are checked against the SHA-256 sums of the copies this subset was made from
(pass --no-verify to skip), and the full split sizes (43410/5426/5427) are checked.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
from pathlib import Path

SPLITS = (  # (source file, output file, rows taken, rows in the full official split)
    ("train.tsv", "train.jsonl", 3000, 43410),
    ("dev.tsv", "validation.jsonl", 600, 5426),
    ("test.tsv", "test.jsonl", 1500, 5427),
)
SHA256 = {
    "train.tsv": "1c254a142be5c00e80d819b9ae1bbd36d94b2eeb8f4b1271846508d57e57d9c5",
    "dev.tsv": "575489c079c9de1097062a01738f998590d6b7ead66dd1c9fd1d2ba01fd8bc62",
    "test.tsv": "0587b2dd8b27b97352adbfc3fb083d46005c8946657fdc2b1ca8b1cc7f1f8be4",
    "emotions.txt": "45c3ef86782d2a4d7fedcd6d8c111aa0d0e94720689bd164fac94fefb4495a89",
}


EKMAN = {  # GoEmotions' own grouping (goemotions/data/ekman_mapping.json): Ekman's six, and neutral
    "anger": ["anger", "annoyance", "disapproval"],
    "disgust": ["disgust"],
    "fear": ["fear", "nervousness"],
    "joy": [
        "joy",
        "amusement",
        "approval",
        "excitement",
        "gratitude",
        "love",
        "optimism",
        "relief",
        "pride",
        "admiration",
        "desire",
        "caring",
    ],  # fmt: skip
    "sadness": ["sadness", "disappointment", "embarrassment", "grief", "remorse"],
    "surprise": ["surprise", "realization", "confusion", "curiosity"],
    "neutral": ["neutral"],
}
"""The same rows with 7 labels are written to ``ekman/`` (labels sorted by name)."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source_dir", type=Path, help="folder with train.tsv, dev.tsv, test.tsv, emotions.txt")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="output folder (default: the folder of this script)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check of the source files")
    args = parser.parse_args()

    src: Path = args.source_dir
    if not args.no_verify:
        for name, want in SHA256.items():
            got = sha256(src / name)
            if got != want:
                sys.exit(f"{src / name}: SHA-256 {got} differs from the expected {want} (use --no-verify to go on)")

    names = (src / "emotions.txt").read_text(encoding="utf-8").split("\n")
    names = [n for n in names if n]
    if len(names) != 28:
        sys.exit(f"emotions.txt: expected 28 label names, found {len(names)}")

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ekman").mkdir(exist_ok=True)
    group = {emotion: name for name, emotions in EKMAN.items() for emotion in emotions}
    for source, target, take, full in SPLITS:
        with open(src / source, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        if len(rows) != full:
            sys.exit(f"{source}: expected {full} rows, found {len(rows)}")
        with (
            open(args.out / target, "w", encoding="utf-8", newline="\n") as out,
            open(args.out / "ekman" / target, "w", encoding="utf-8", newline="\n") as ekman,
        ):
            for number, row in enumerate(rows[:take], start=1):
                if len(row) != 3:
                    sys.exit(f"{source} row {number}: expected 3 columns, found {len(row)}")
                text, ids, _comment_id = row
                label_ids = sorted({int(i) for i in ids.split(",")})
                if any(not 0 <= i < len(names) for i in label_ids):
                    sys.exit(f"{source} row {number}: label id out of range: {ids}")
                out.write(
                    json.dumps({"text": text, "labels": [names[i] for i in label_ids]}, ensure_ascii=False) + "\n"
                )
                grouped = sorted({group[names[i]] for i in label_ids})
                ekman.write(json.dumps({"text": text, "labels": grouped}, ensure_ascii=False) + "\n")
        print(f"{target}: {take} rows (first {take} of {full} in {source})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
