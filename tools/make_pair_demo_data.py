"""Generate the small demo sentence-pair dataset used by ``recipes/pair.toml``.

Writes ``train.csv`` (2,400 pairs), ``validation.csv`` (300) and ``test.csv`` (300) into
``--out`` (default ``recipes/data/pair``), header ``text_a,text_b,label,score``:

* ``label``: ``1`` when both questions ask the same thing (same intent), else ``0``; about half
  the pairs are positive;
* ``score``: a graded similarity from 0 to 5 for the same pairs: 5 same intent and the same
  details, 4 same intent with other details (another city or date), 2 a related intent of the
  same topic (cancel vs change a booking), 0 an unrelated one.  ``recipes/pair.toml`` trains on
  ``label``; tests train a regression head on ``score``.

The questions are synthetic and were written for this project: customer-service questions about
hotel and train bookings, each intent with several hand-written phrasings and slots (city, date,
hotel) filled at random.  No third-party corpus was used or copied.  Deterministic for a seed
(``random.Random``); pairs are de-duplicated before splitting, so no pair occurs in two splits.

Usage::

    python tools/make_pair_demo_data.py [--seed 11] [--out recipes/data/pair]
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

CITIES = ["北京", "上海", "杭州", "成都", "西安", "广州", "南京", "厦门", "青岛", "昆明", "武汉", "长沙"]
DATES = ["明天", "后天", "周五", "下周一", "这个周末", "五月三号", "国庆节", "月底"]
HOTELS = ["湖畔酒店", "云山客栈", "城东宾馆", "海景大酒店", "花园公寓", "老街民宿"]

# intent -> (topic, phrasings).  Slots: {city} {date} {hotel}.
INTENTS: dict[str, tuple[str, list[str]]] = {
    "refund": (
        "money",
        [
            "订单取消以后多久能退款",
            "退款一般几天能到账",
            "我的退款什么时候到",
            "取消的订单钱怎么还没退回来",
            "退的钱要多久才能收到",
            "{hotel}的房费退款几天到账",
        ],
    ),
    "invoice": (
        "money",
        [
            "怎么开发票",
            "住完{hotel}可以开发票吗",
            "发票在哪里申请",
            "能不能给我开个住宿发票",
            "电子发票怎么下载",
            "开发票需要提供什么信息",
        ],
    ),
    "cancel_hotel": (
        "hotel",
        [
            "{date}{hotel}的订单怎么取消",
            "我想取消{city}的酒店预订",
            "预订的房间不想住了能取消吗",
            "怎么退掉{date}在{hotel}订的房",
            "酒店订单可以免费取消吗",
            "取消{city}{hotel}的房间要扣钱吗",
        ],
    ),
    "change_hotel": (
        "hotel",
        [
            "{hotel}的入住日期能改到{date}吗",
            "我想把{city}的酒店换个日期",
            "订好的房间可以改时间吗",
            "怎么修改{date}的酒店订单",
            "能把{hotel}的房型换成大床房吗",
            "酒店预订的入住人可以改吗",
        ],
    ),
    "breakfast": (
        "hotel",
        [
            "{hotel}含早餐吗",
            "酒店早餐几点开始",
            "房费里包括早饭吗",
            "{city}这家酒店有没有早餐",
            "早餐要另外付钱吗",
            "{hotel}的早餐在几楼",
        ],
    ),
    "checkin_time": (
        "hotel",
        [
            "{hotel}几点可以入住",
            "最早什么时候能办入住",
            "下午一点能入住{hotel}吗",
            "入住时间是几点",
            "{date}晚上很晚到还能入住吗",
            "可以提前办理入住吗",
        ],
    ),
    "parking": (
        "hotel",
        [
            "{hotel}有停车场吗",
            "酒店停车要收费吗",
            "开车去{city}住酒店能停车吗",
            "停车位需要提前预约吗",
            "{hotel}附近哪里能停车",
            "住店客人停车免费吗",
        ],
    ),
    "refund_ticket": (
        "train",
        [
            "{date}去{city}的火车票怎么退",
            "高铁票退票要手续费吗",
            "我想退掉{city}的车票",
            "车票退了钱多久到账",
            "开车前多久可以退票",
            "去{city}的票不想要了怎么办",
        ],
    ),
    "change_ticket": (
        "train",
        [
            "{city}的火车票能改签到{date}吗",
            "高铁票怎么改签",
            "我想把车票换到{date}",
            "改签要不要补差价",
            "已经取票了还能改签吗",
            "去{city}的车次可以换吗",
        ],
    ),
    "seat": (
        "train",
        [
            "买{city}的高铁票能选座位吗",
            "怎么选靠窗的座位",
            "可以和同伴坐在一起吗",
            "选座要加钱吗",
            "{date}的车票还能选座吗",
            "网上买票怎么选座",
        ],
    ),
    "luggage": (
        "train",
        [
            "坐火车行李有重量限制吗",
            "高铁上能带多大的箱子",
            "{date}去{city}可以带宠物上车吗",
            "行李太多可以托运吗",
            "火车上能带充电宝吗",
            "超重的行李要收费吗",
        ],
    ),
    "password": (
        "account",
        [
            "登录密码忘了怎么办",
            "怎么重置账户密码",
            "密码输错被锁了怎么解锁",
            "怎么修改登录密码",
            "收不到重置密码的短信",
            "账号密码找回不了怎么办",
        ],
    ),
    "phone": (
        "account",
        [
            "怎么更换绑定的手机号",
            "手机号不用了账号怎么办",
            "绑定手机能改吗",
            "换了新号码怎么改绑定",
            "旧手机号收不到验证码了",
            "账户里的电话怎么修改",
        ],
    ),
}


def fill(rng: random.Random, template: str, slots: dict[str, str]) -> str:
    text = template.format(**slots)
    if rng.random() < 0.3:
        text += rng.choice(["？", "?", "呢", "啊", "，谢谢", "，急"])
    elif not text.endswith(("吗", "呢")):
        text += rng.choice(["", "？"])
    return text


def slots(rng: random.Random) -> dict[str, str]:
    return {"city": rng.choice(CITIES), "date": rng.choice(DATES), "hotel": rng.choice(HOTELS)}


def make_pair(rng: random.Random) -> tuple[str, str, str, str]:
    names = list(INTENTS)
    intent = rng.choice(names)
    topic, phrasings = INTENTS[intent]
    first = slots(rng)
    a = fill(rng, rng.choice(phrasings), first)
    kind = rng.random()
    if kind < 0.5:  # same intent
        second = first if rng.random() < 0.6 else slots(rng)
        other = rng.choice([p for p in phrasings if p != a] or phrasings)
        b = fill(rng, other, second)
        uses_slots = "{" in other
        score = "5" if second is first or not uses_slots else "4"
        return a, b, "1", score
    related = [n for n in names if n != intent and INTENTS[n][0] == topic]
    if kind < 0.8 and related:  # related intent, same details: the hard negatives
        b = fill(rng, rng.choice(INTENTS[rng.choice(related)][1]), first)
        return a, b, "0", "2"
    unrelated = [n for n in names if INTENTS[n][0] != topic]
    b = fill(rng, rng.choice(INTENTS[rng.choice(unrelated)][1]), slots(rng))
    return a, b, "0", "0"


def generate(seed: int, sizes: tuple[int, int, int] = (2400, 300, 300)) -> dict[str, list[tuple[str, ...]]]:
    rng = random.Random(seed)
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, ...]] = []
    while len(pairs) < sum(sizes):
        a, b, label, score = make_pair(rng)
        if a == b or (a, b) in seen or (b, a) in seen:
            continue
        seen.add((a, b))
        pairs.append((a, b, label, score))
    train, validation = sizes[0], sizes[0] + sizes[1]
    return {"train": pairs[:train], "validation": pairs[train:validation], "test": pairs[validation:]}


def write_csv(path: Path, rows: list[tuple[str, ...]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["text_a", "text_b", "label", "score"])
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=11, help="random seed (default: 11)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "recipes" / "data" / "pair")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, rows in generate(args.seed).items():
        write_csv(args.out / f"{split}.csv", rows)
        positive = sum(1 for row in rows if row[2] == "1")
        print(f"{args.out / f'{split}.csv'}: {len(rows)} pairs, {positive} same intent")


if __name__ == "__main__":
    main()
