"""Write data/{train,validation,test}.jsonl for the s2s test plugin: words of 3 to 7 letters
(a to l) and their reversal, drawn with a fixed seed.  Run: python make_data.py"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = {"train": 600, "validation": 40, "test": 40}


def main() -> None:
    rng = random.Random(7)
    seen: set[str] = set()
    for split, size in SIZES.items():
        rows = []
        while len(rows) < size:
            word = "".join(rng.choice("abcdefghijkl") for _ in range(rng.randint(3, 7)))
            if word in seen:
                continue
            seen.add(word)
            rows.append({"source": word, "target": word[::-1]})
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (HERE / "data" / f"{split}.jsonl").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
