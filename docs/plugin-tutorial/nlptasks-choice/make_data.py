"""Write the data of the ``choice`` tutorial plugin: a split of CODAH, real English multiple choice.

CODAH (the COmmonsense Dataset Adversarially-authored by Humans; Chen et al., 2019) is 2,776
sentence completions in the style of SWAG, written by people who saw a model's answers: a prompt
("I am feeling hungry. I think I will") and four endings, exactly one of them sensible.

Input (nothing is downloaded; give the file on the command line):

    data/full_data.tsv of https://github.com/Websail-NU/CODAH at commit
    acf7ffa4041ade86c6f7dd2f92fb08c957350280 (git blob 75f9c276973b989c9744832e05d3b1fbab917c17,
    485,130 bytes), released under the Open Data Commons Attribution License 1.0.  Seven TAB-separated
    columns, no header: question categories (letters), prompt, four candidate endings, the index
    (0-3) of the right one.  With a git mirror of the repository:

        git -C CODAH show acf7ffa4041ade86c6f7dd2f92fb08c957350280:data/full_data.tsv > full_data.tsv

The file's git blob id is checked, so the split below is reproducible exactly.  Every row is kept,
in file order numbered 1..2776 (``id``), then shuffled with ``random.Random(42).shuffle`` (CPython's
``random``): the first 300 are ``test``, the next 300 ``validation``, the other 2,176 ``train``.

Files written into ``--out`` (default: ``data/`` next to this script), UTF-8, ``\\n`` line ends:

    train.jsonl, validation.jsonl   {"id", "category", "context", "choices": [4 texts], "label": 0-3}
    test.csv                        header id,category,context,choices0,choices1,choices2,choices3,label
                                    (the same fields with one column per choice; Python's csv module)

Usage::

    python make_data.py full_data.tsv [--out data]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import random
from pathlib import Path

BLOB = "75f9c276973b989c9744832e05d3b1fbab917c17"  # git hash-object of data/full_data.tsv at acf7ffa
SPLITS = (("test", 300), ("validation", 300))  # the rest is train


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def read_rows(path: Path) -> list[dict[str, object]]:
    raw = path.read_bytes()
    if git_blob_id(raw) != BLOB:
        raise SystemExit(f"{path} is not CODAH's data/full_data.tsv at acf7ffa (git blob {BLOB})")
    rows = []
    for number, line in enumerate(raw.decode("utf-8").split("\n"), start=1):
        if not line:
            continue
        fields = line.split("\t")
        assert len(fields) == 7 and fields[6] in "0123", (number, line)
        rows.append(
            {"id": number, "category": fields[0], "context": fields[1], "choices": fields[2:6], "label": int(fields[6])}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="CODAH's data/full_data.tsv (commit acf7ffa)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    args = parser.parse_args()
    rows = read_rows(args.source)
    random.Random(42).shuffle(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    start = 0
    parts = {}
    for name, count in SPLITS:
        parts[name] = rows[start : start + count]
        start += count
    parts["train"] = rows[start:]
    for name in ("train", "validation"):
        with (args.out / f"{name}.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
            for row in parts[name]:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (args.out / "test.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["id", "category", "context", "choices0", "choices1", "choices2", "choices3", "label"])
        for row in parts["test"]:
            writer.writerow([row["id"], row["category"], row["context"], *row["choices"], row["label"]])
    for name in ("train", "validation", "test"):
        print(f"{name}: {len(parts[name])} rows")


if __name__ == "__main__":
    main()
