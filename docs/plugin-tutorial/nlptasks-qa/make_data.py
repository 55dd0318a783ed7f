"""Write the demo data of the ``qa`` tutorial plugin.

Short synthetic descriptions of hotels, each a paragraph of facts (check-in and check-out time,
the front desk's phone number, breakfast hours, the address, the price of a standard room,
parking) in random order among sentences that state no fact, and one question about one of the
facts, answered by a span of the paragraph.  Several facts are times, so the question must be
read to pick the right one; the values are drawn at random, so answers cannot be remembered.  A
paragraph is about 150 characters: longer than the tutorial model's ``max_length`` of 64 tokens,
so it is cut into windows.

Everything is composed from the building blocks below, written for this tutorial; no corpus was
used.  Deterministic for a given ``--seed``.

Files written into ``--out`` (default: ``data/`` next to this script), JSON lines with
``id``, ``question``, ``context``, ``answer`` and ``answer_start`` (the answer's first character
in the context)::

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

HOTELS = [
    "湖畔酒店",
    "山景酒店",
    "云顶宾馆",
    "江南客栈",
    "海风度假村",
    "望月楼酒店",
    "松林山庄",
    "梧桐花园酒店",
    "青石桥客栈",
    "白鹭洲酒店",
    "金桂大酒店",
    "星河公寓",
    "竹溪民宿",
    "东湖宾馆",
    "西岭雪山酒店",
    "南山旅舍",
]
CITIES = ["杭州", "苏州", "南京", "成都", "厦门", "昆明", "青岛", "西安"]
DISTRICTS = ["西湖区", "姑苏区", "鼓楼区", "锦江区", "思明区", "盘龙区", "市南区", "雁塔区"]
STREETS = ["湖滨路", "人民路", "中山路", "解放路", "长江路", "文化路", "建设路", "友谊路"]
NUMBERS = [
    "一",
    "二",
    "三",
    "四",
    "五",
    "六",
    "七",
    "八",
    "九",
    "十",
    "十一",
    "十二",
    "十五",
    "二十",
    "二十八",
    "三十六",
]
HOURS = ["一点", "两点", "三点", "四点", "五点", "六点", "七点", "八点", "九点", "十点", "十一点", "十二点"]
PRICES = ["二百八十元", "三百二十元", "三百八十元", "四百五十元", "五百元", "五百六十元", "六百八十元", "八百元"]

# fact type -> (how the paragraph states it, the values, the questions)
FACTS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "checkin": (
        ["入住时间是{v}。", "办理入住的时间为{v}。"],
        [f"下午{h}" for h in HOURS[:5]] + ["中午十二点"],
        ["{h}几点可以入住？", "{h}的入住时间是几点？", "入住{h}最早几点？"],
    ),
    "checkout": (
        ["退房时间是{v}。", "最晚退房时间为{v}。"],
        [f"上午{h}" for h in HOURS[8:11]] + ["中午十二点", "下午一点", "下午两点"],
        ["{h}几点退房？", "{h}最晚几点要退房？", "{h}的退房时间是什么时候？"],
    ),
    "phone": (
        ["前台电话是{v}。", "预订电话为{v}。"],
        [],  # random digits
        ["{h}的电话是多少？", "怎么打电话给{h}？", "{h}的预订电话是什么？"],
    ),
    "breakfast": (
        ["早餐供应时间是{v}。", "自助早餐在{v}供应。"],
        [f"早上{a}到{b}" for a in ("六点", "六点半", "七点") for b in ("九点", "九点半", "十点")],
        ["{h}早餐几点供应？", "{h}的早餐什么时候有？", "{h}几点可以吃早饭？"],
    ),
    "address": (
        ["地址是{v}。", "酒店位于{v}。"],
        [],  # composed
        ["{h}在哪里？", "{h}的地址是什么？", "{h}怎么找？"],
    ),
    "price": (
        ["标准间每晚{v}。", "标准间的价格是每晚{v}。"],
        PRICES,
        ["{h}标准间多少钱一晚？", "{h}住一晚要多少钱？", "{h}的房价是多少？"],
    ),
    "parking": (
        ["停车费是{v}。", "停车收费标准为{v}。"],
        ["每小时五元", "每小时十元", "每天三十元", "每天五十元", "住店客人免费"],
        ["{h}停车怎么收费？", "{h}停车要钱吗？", "{h}的停车费是多少？"],
    ),
}

FILLERS = [
    "酒店环境安静，适合商务出行。",
    "周边有很多餐厅和商店。",
    "客房干净整洁，服务热情周到。",
    "酒店提供免费无线网络。",
    "大堂宽敞明亮，装修很有特色。",
    "这里离景区不远，出行方便。",
    "房间里有一张很舒服的大床。",
    "楼顶有一个小花园可以看夜景。",
    "酒店可以帮客人寄存行李。",
    "冬天房间里有暖气。",
    "前台可以帮忙叫出租车。",
    "附近有一家很有名的面馆。",
]


def value(kind: str, rng: random.Random) -> str:
    if kind == "phone":
        return f"0{rng.choice(['571', '512', '25', '28', '592', '871', '532', '29'])}-{rng.randint(10_000_000, 99_999_999)}"
    if kind == "address":
        return f"{rng.choice(CITIES)}市{rng.choice(DISTRICTS)}{rng.choice(STREETS)}{rng.choice(NUMBERS)}号"
    return rng.choice(FACTS[kind][1])


def example(rng: random.Random, number: int) -> dict[str, object]:
    hotel = rng.choice(HOTELS)
    kinds = rng.sample(list(FACTS), k=rng.randint(4, 6))
    asked = rng.choice(kinds)
    sentences = [(k, rng.choice(FACTS[k][0]), value(k, rng)) for k in kinds]
    sentences += [(None, f, "") for f in rng.sample(FILLERS, k=rng.randint(2, 3))]
    rng.shuffle(sentences)
    context = f"{hotel}是{rng.choice(CITIES)}的一家酒店。"
    answer_start, answer = -1, ""
    for kind, pattern, v in sentences:
        if kind == asked:
            answer, answer_start = v, len(context) + pattern.index("{v}")
        context += pattern.replace("{v}", v)
    question = rng.choice(FACTS[asked][2]).replace("{h}", hotel)
    assert context[answer_start : answer_start + len(answer)] == answer
    return {"id": number, "question": question, "context": context, "answer": answer, "answer_start": answer_start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    number = 0
    for name, rows in (("train", 600), ("validation", 100), ("test", 100)):
        with (args.out / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            for _ in range(rows):
                number += 1
                fh.write(json.dumps(example(rng, number), ensure_ascii=False) + "\n")
        print(f"wrote {rows} rows to {args.out / name}.jsonl")


if __name__ == "__main__":
    main()
