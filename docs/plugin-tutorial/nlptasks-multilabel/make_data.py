"""Write the demo data of the ``multilabel`` tutorial plugin.

Short synthetic Chinese hotel reviews, each tagged with the aspects it talks about:
服务 (service), 位置 (location), 卫生 (cleanliness), 早餐 (breakfast), 价格 (price).
A review mentions zero to three aspects, praising or criticising each; it may also carry
clauses about things that are *not* aspects (the room size, the bed, the view...) so that a
model cannot tag 卫生 just because it sees 房间.

Every sentence is composed at random from the building blocks below, which were written for
this tutorial; no corpus was used.  Deterministic for a given ``--seed``; texts are unique
across the three files.

Files written into ``--out`` (default: ``data/`` next to this script)::

    train.csv        300 rows, header ``text,labels``, labels joined with "|" ("服务|位置")
    validation.csv    60 rows, same format
    test.jsonl        60 rows, {"text": ..., "labels": ["服务", "位置"]} (a JSON list)

Usage::

    python make_data.py [--seed 13] [--out data]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path

ASPECTS = ["服务", "位置", "卫生", "早餐", "价格"]

# Clauses per aspect: "{a}" is replaced by a degree adverb (possibly none).
CLAUSES: dict[str, list[str]] = {
    "服务": [
        "服务{a}热情",
        "服务{a}周到",
        "服务态度{a}好",
        "前台{a}耐心",
        "工作人员{a}专业",
        "服务员{a}贴心",
        "前台小哥帮我们叫了车",
        "入住时还送了一盘水果",
        "有事打电话随叫随到",
        "服务{a}差",
        "服务态度{a}冷淡",
        "前台{a}敷衍",
        "工作人员{a}不耐烦",
        "打了三次电话都没人接",
        "办入住等了半个小时",
        "问前台问题爱答不理",
        "管家{a}细心",
        "退房时前台还多收了押金",
    ],
    "位置": [
        "位置{a}好",
        "地段{a}优越",
        "交通{a}方便",
        "地理位置{a}便利",
        "出门就是地铁站",
        "步行十分钟就到湖边",
        "楼下就是商场",
        "离火车站只有两站路",
        "位置{a}偏",
        "地段{a}偏僻",
        "交通{a}不便",
        "离市区太远了",
        "导航绕了半天才找到",
        "周边什么都没有",
        "打车都打不到",
        "附近吃饭逛街都方便",
    ],
    "卫生": [
        "卫生{a}好",
        "房间{a}干净",
        "床单{a}干净",
        "卫生间{a}整洁",
        "浴室打扫得{a}彻底",
        "毛巾都是新换的",
        "桌面一尘不染",
        "卫生{a}差",
        "房间{a}脏",
        "床单上有头发",
        "地毯上全是污渍",
        "卫生间有股异味",
        "浴室角落发霉了",
        "杯子上有水渍",
        "马桶都没刷干净",
    ],
    "早餐": [
        "早餐{a}丰富",
        "早餐{a}好吃",
        "自助早餐种类{a}多",
        "早饭{a}可口",
        "早上的小笼包{a}好吃",
        "豆浆油条都有",
        "鸡蛋是现煎的",
        "早餐{a}难吃",
        "早餐{a}单调",
        "早饭都是凉的",
        "餐厅八点就没吃的了",
        "早餐只有馒头咸菜",
        "早餐的粥{a}稀",
    ],
    "价格": [
        "价格{a}实惠",
        "房价{a}合理",
        "性价比{a}高",
        "价格{a}便宜",
        "这个价钱{a}划算",
        "比旁边几家便宜不少",
        "价格{a}贵",
        "房价{a}离谱",
        "性价比{a}低",
        "节假日房价翻了三倍",
        "这个价钱不值",
        "价格偏高",
    ],
}

# Clauses about no aspect: shared characters (房间, 床, 吵...) with the aspect clauses on purpose.
OTHER = [
    "房间{a}大",
    "房间{a}小",
    "床{a}舒服",
    "床{a}硬",
    "隔音{a}一般",
    "空调有点吵",
    "窗外风景{a}美",
    "wifi{a}快",
    "wifi经常断",
    "电视是智能的",
    "装修{a}新",
    "装修有点旧",
    "房间朝南阳光好",
    "楼道里有点吵",
    "电梯要等很久",
]

ADVERBS = ["很", "非常", "特别", "挺", "十分", "比较", "真的", "超级", ""]
OPENINGS = [
    "",
    "",
    "",
    "住了两晚，",
    "出差住了一晚，",
    "带父母来玩，",
    "第二次入住，",
    "周末来的，",
    "朋友推荐的，",
    "国庆来的，",
    "订的大床房，",
]
CLOSINGS = ["", "", "", "下次还来", "推荐", "总体还行", "一般般吧", "不会再来了", "给五星", "就这样"]
ENDINGS = ["。", "！", "", "~"]
# Reviews that mention no aspect at all.
NO_ASPECT = ["总体还行", "一般般吧", "还可以", "就那样吧", "没什么特别的", "挺好的，推荐", "不推荐"]


def review(rng: random.Random) -> tuple[str, list[str]]:
    k = rng.choices([0, 1, 2, 3], weights=[4, 40, 40, 16])[0]
    aspects = rng.sample(ASPECTS, k)
    clauses = [rng.choice(CLAUSES[a]).format(a=rng.choice(ADVERBS)) for a in aspects]
    for _ in range(rng.choices([0, 1, 2], weights=[50, 38, 12])[0]):
        clauses.insert(rng.randrange(len(clauses) + 1), rng.choice(OTHER).format(a=rng.choice(ADVERBS)))
    if not clauses:
        clauses = [rng.choice(NO_ASPECT)]
    closing = rng.choice(CLOSINGS)
    if closing:
        clauses.append(closing)
    text = rng.choice(OPENINGS) + "，".join(clauses) + rng.choice(ENDINGS)
    return text, [a for a in ASPECTS if a in aspects]  # labels in a fixed order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    sizes = {"train": 300, "validation": 60, "test": 60}
    seen: set[str] = set()
    rows: list[tuple[str, list[str]]] = []
    while len(rows) < sum(sizes.values()):
        text, labels = review(rng)
        if text not in seen:
            seen.add(text)
            rows.append((text, labels))
    args.out.mkdir(parents=True, exist_ok=True)
    start = 0
    for split, n in sizes.items():
        part, start = rows[start : start + n], start + n
        if split == "test":
            with (args.out / "test.jsonl").open("w", encoding="utf-8") as fh:
                for text, labels in part:
                    fh.write(json.dumps({"text": text, "labels": labels}, ensure_ascii=False) + "\n")
        else:
            with (args.out / f"{split}.csv").open("w", encoding="utf-8", newline="") as fh:
                writer = csv.writer(fh, lineterminator="\n")
                writer.writerow(["text", "labels"])
                writer.writerows((text, "|".join(labels)) for text, labels in part)
        print(f"{split}: {len(part)} rows")


if __name__ == "__main__":
    main()
