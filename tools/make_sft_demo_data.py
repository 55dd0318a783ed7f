"""Generate the small demo instruction dataset used by ``recipes/sft.toml``.

Writes ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl`` (alpaca shape:
``instruction``, ``input``, ``output``) into ``--out`` (default ``recipes/data/sft``):

* hotel questions answered from a fixed fact sheet of six made-up hotels (check-in time,
  breakfast, parking, price, city) — the model has to learn which facts belong to which hotel;
* "which city does this sentence mention?" with the sentence in ``input`` — a copy task;
* "repeat this sentence" — the simplest copy task.

Every row was written for this project from the hand-made lists below (no third-party corpus).
Deterministic for a seed; rows are de-duplicated before splitting, so no row is in two splits.

Usage::

    python tools/make_sft_demo_data.py [--seed 7] [--out recipes/data/sft]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HOTELS = {
    "湖畔酒店": {
        "checkin": "下午两点",
        "breakfast": "含双人早餐",
        "parking": "有免费停车场",
        "price": "四百八十元",
        "city": "杭州",
    },
    "云山客栈": {
        "checkin": "中午十二点",
        "breakfast": "不含早餐，早餐每位三十元",
        "parking": "没有停车场",
        "price": "二百六十元",
        "city": "昆明",
    },
    "城东宾馆": {
        "checkin": "下午三点",
        "breakfast": "含单人早餐",
        "parking": "停车每晚二十元",
        "price": "一百九十元",
        "city": "西安",
    },
    "海景大酒店": {
        "checkin": "下午两点",
        "breakfast": "含自助早餐",
        "parking": "有地下停车场",
        "price": "六百八十元",
        "city": "厦门",
    },
    "花园公寓": {
        "checkin": "下午四点",
        "breakfast": "不含早餐，楼下有早餐店",
        "parking": "有免费停车场",
        "price": "三百二十元",
        "city": "成都",
    },
    "老街民宿": {
        "checkin": "下午一点",
        "breakfast": "含中式早餐",
        "parking": "没有停车场",
        "price": "二百二十元",
        "city": "南京",
    },
}

INTENTS = {
    "checkin": (
        ["{h}几点可以入住", "{h}的入住时间是几点", "{h}最早几点能入住", "几点能住进{h}"],
        "{h}的入住时间是{checkin}以后。",
    ),
    "breakfast": (["{h}有早餐吗", "住{h}含早餐吗", "{h}的房费包括早饭吗", "{h}提供早餐吗"], "{h}{breakfast}。"),
    "parking": (["{h}能停车吗", "{h}有停车场吗", "开车去{h}停哪里", "{h}停车收费吗"], "{h}{parking}。"),
    "price": (
        ["{h}一晚多少钱", "{h}标准间什么价格", "{h}住一晚要多少钱", "{h}的房价是多少"],
        "{h}的标准间每晚{price}。",
    ),
    "city": (["{h}在哪个城市", "{h}位于哪里", "{h}在什么地方", "{h}是哪个城市的酒店"], "{h}位于{city}。"),
}
OPENERS = ["", "你好，", "请问", "您好，请问"]
ENDINGS = ["？", "?"]

CITIES = ["北京", "上海", "杭州", "成都", "西安", "广州", "南京", "厦门", "青岛", "昆明", "武汉", "长沙"]
CITY_SENTENCES = [
    "我下周要去{c}出差",
    "明天从{c}出发",
    "{c}的天气最近很好",
    "我们打算国庆节去{c}玩",
    "他在{c}工作了三年",
    "这趟火车开往{c}",
    "帮我订一张去{c}的机票",
    "{c}的小吃很有名",
    "周末想在{c}住两晚",
    "她老家是{c}的",
]
CITY_INSTRUCTIONS = ["找出句子里提到的城市。", "这句话说的是哪个城市？", "句子中出现了哪个城市？"]
REPEAT_INSTRUCTIONS = ["重复下面这句话。", "把这句话原样写一遍。"]
REPEAT_SENTENCES = [
    "今天的会议改到下午三点",
    "请把房间打扫干净",
    "早餐在二楼餐厅",
    "退房时请归还房卡",
    "前台二十四小时有人",
    "行李可以寄存在前台",
    "房间里有免费无线网络",
    "游泳池晚上十点关闭",
    "需要叫车请联系前台",
    "洗衣服务每件十元",
    "健身房在三楼",
    "大堂有自动售货机",
]


def rows(rng: random.Random) -> list[dict[str, str]]:
    out = []
    for hotel, facts in HOTELS.items():
        for questions, answer in INTENTS.values():
            for q in questions:
                for opener in OPENERS:
                    ending = rng.choice(ENDINGS)
                    out.append(
                        {
                            "instruction": opener + q.format(h=hotel) + ending,
                            "input": "",
                            "output": answer.format(h=hotel, **facts),
                        }
                    )
    for template in CITY_SENTENCES:
        for city in CITIES:
            out.append(
                {"instruction": rng.choice(CITY_INSTRUCTIONS), "input": template.format(c=city) + "。", "output": city}
            )
    for sentence in REPEAT_SENTENCES:
        for instruction in REPEAT_INSTRUCTIONS:
            out.append({"instruction": instruction, "input": sentence + "。", "output": sentence + "。"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("recipes/data/sft"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    unique = {json.dumps(r, ensure_ascii=False, sort_keys=True): r for r in rows(rng)}
    write_splits(list(unique.values()), rng, args.out, "rows")


def write_splits(items: list[dict], rng: random.Random, out: Path, noun: str) -> None:
    """Shuffle ``items`` with ``rng`` and write 10% to validation.jsonl, 10% to test.jsonl and the
    rest to train.jsonl under ``out`` (tools/make_dpo_demo_data.py splits its pairs the same way)."""
    rng.shuffle(items)
    n = len(items)
    splits = {"validation": items[: n // 10], "test": items[n // 10 : n // 5], "train": items[n // 5 :]}
    out.mkdir(parents=True, exist_ok=True)
    for name, part in splits.items():
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in part:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"{out / name}.jsonl: {len(part)} {noun}")


if __name__ == "__main__":
    main()
