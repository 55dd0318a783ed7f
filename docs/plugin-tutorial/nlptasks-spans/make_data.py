"""Write the demo data of the ``spans`` tutorial plugin.

Short synthetic Chinese sentences about people, places and organisations, whose entities nest:
an organisation is often named after a place (``杭州西湖大酒店`` is an ORG with the LOCs ``杭州`` and
``西湖`` inside it), and a person may be named with a place before the name.  One tag per character
(BIO) cannot write these down; spans can.  Names, places and templates are drawn at random from
the lists below, written for this tutorial (no corpus was used), so the entities cannot be
remembered from the training rows.  Deterministic for a given ``--seed``.

Files written into ``--out`` (default: ``data/`` next to this script), JSON lines with ``text`` and
``entities`` (``{"start", "end", "label"}``, character offsets, ``end`` exclusive)::

    train.jsonl        600 rows
    validation.jsonl   100 rows
    test.jsonl         100 rows

Usage::

    python make_data.py [--seed 7] [--out data]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SURNAMES = list("王李张刘陈杨黄赵周吴徐孙马朱胡郭何林罗高")
GIVEN = [
    "伟",
    "芳",
    "娜",
    "敏",
    "静",
    "强",
    "磊",
    "洋",
    "艳",
    "勇",
    "军",
    "杰",
    "涛",
    "明",
    "超",
    "秀英",
    "建国",
    "晓东",
    "丽华",
]
CITIES = ["杭州", "苏州", "南京", "成都", "厦门", "昆明", "青岛", "西安", "武汉", "长沙", "重庆", "大连"]
SIGHTS = ["西湖", "太湖", "东湖", "玄武湖", "鼓浪屿", "滇池", "崂山", "大雁塔", "黄鹤楼", "橘子洲", "洪崖洞", "星海"]
ORG_KINDS = ["大酒店", "银行", "大学", "医院", "博物馆", "图书馆", "电视台", "体育馆"]
TEMPLATES = [
    "{P}昨天在{O}见到了{P2}。",
    "{P}说{O}今年的客人比去年多。",
    "{O}的{P}下周要去{L}出差。",
    "我们在{L}住了三天，{O}的服务很好。",
    "{P}和{P2}一起参观了{O}。",
    "听说{O}要在{L}开一家新店。",
    "{P}从{L}回来以后就去了{O}。",
    "{L}的天气很好，{P}每天都去{O}。",
]


def person(rng: random.Random) -> str:
    return rng.choice(SURNAMES) + rng.choice(GIVEN)


def organisation(rng: random.Random) -> tuple[str, list[tuple[int, int, str]]]:
    """An ORG named after a city, a sight or both, with those places as nested LOC spans."""
    parts: list[tuple[str, str | None]] = []
    shape = rng.randrange(3)
    if shape in (0, 2):
        parts.append((rng.choice(CITIES), "LOC"))
    if shape in (1, 2):
        parts.append((rng.choice(SIGHTS), "LOC"))
    parts.append((rng.choice(ORG_KINDS), None))
    name, inner, at = "", [], 0
    for text, label in parts:
        if label:
            inner.append((at, at + len(text), label))
        name += text
        at += len(text)
    return name, inner


def sentence(rng: random.Random) -> dict[str, object]:
    template = rng.choice(TEMPLATES)
    text, entities = "", []
    fields = {"P": person, "P2": person}
    rest = template
    while rest:
        start = rest.find("{")
        if start < 0:
            text += rest
            break
        text += rest[:start]
        key = rest[start + 1 : rest.index("}")]
        rest = rest[rest.index("}") + 1 :]
        at = len(text)
        if key in fields:
            value = fields[key](rng)
            entities.append({"start": at, "end": at + len(value), "label": "PER"})
        elif key == "L":
            value = rng.choice(CITIES + SIGHTS)
            entities.append({"start": at, "end": at + len(value), "label": "LOC"})
        else:
            value, inner = organisation(rng)
            entities.append({"start": at, "end": at + len(value), "label": "ORG"})
            entities += [{"start": at + s, "end": at + e, "label": label} for s, e, label in inner]
        text += value
    entities.sort(key=lambda e: (e["start"], -e["end"]))
    return {"text": text, "entities": entities}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 600), ("validation", 100), ("test", 100)):
        with (args.out / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for _ in range(n):
                fh.write(json.dumps(sentence(rng), ensure_ascii=False) + "\n")
        print(f"{args.out / f'{split}.jsonl'}: {n} rows")


if __name__ == "__main__":
    main()
