"""Generate the small demo preference pairs used by ``recipes/dpo.toml``.

Writes ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl`` (TRL's conversational shape:
``prompt`` turns, ``chosen`` and ``rejected`` assistant turns) into ``--out`` (default
``recipes/data/dpo``), for the hotel questions of ``tools/make_sft_demo_data.py``:

* style pairs: the chosen answer adds that the front desk never closes (``前台二十四小时有人。``,
  words the sft data has), the rejected one is
  the bare answer the sft quickstart learnt to give — a preference the sft data never showed;
* fact pairs: both answers add it; the rejected one states another hotel's fact
  (the mix-up a small model makes).

Every row was written for this project from the hand-made lists of the sft generator (no
third-party corpus).  Deterministic for a seed; no prompt is in two splits.

Usage::

    python tools/make_dpo_demo_data.py [--seed 7] [--out recipes/data/dpo]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_sft_demo_data import ENDINGS, HOTELS, INTENTS, OPENERS, write_splits  # noqa: E402

CLOSING = "前台二十四小时有人。"


def pairs(rng: random.Random) -> list[dict[str, object]]:
    out = []
    for hotel, facts in HOTELS.items():
        for intent, (questions, answer) in INTENTS.items():
            right = answer.format(h=hotel, **facts)
            others = [o for o in HOTELS.values() if o[intent] != facts[intent]]
            for q in questions:
                for opener in OPENERS:
                    prompt = [{"role": "user", "content": opener + q.format(h=hotel) + rng.choice(ENDINGS)}]
                    if rng.random() < 0.6:
                        rejected = right
                    else:
                        rejected = answer.format(h=hotel, **rng.choice(others)) + CLOSING
                    out.append(
                        {
                            "prompt": prompt,
                            "chosen": [{"role": "assistant", "content": right + CLOSING}],
                            "rejected": [{"role": "assistant", "content": rejected}],
                        }
                    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("recipes/data/dpo"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    unique = {json.dumps(r["prompt"], ensure_ascii=False): r for r in pairs(rng)}  # no prompt in two splits
    write_splits(list(unique.values()), rng, args.out, "pairs")


if __name__ == "__main__":
    main()
