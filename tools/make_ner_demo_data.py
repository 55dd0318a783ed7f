"""Generate the small Chinese NER demo dataset used by ``recipes/ner.toml``.

Writes ``train.jsonl`` (1,200 sentences), ``validation.jsonl`` (200) and ``test.jsonl`` (200)
into ``--out`` (default ``recipes/data/ner``).  Each line is ``{"tokens": [...characters],
"tags": [...BIO tags]}`` with the entity types ``PER`` (people), ``LOC`` (places) and ``ORG``
(organisations).

Everything is synthetic and written for this project: sentences are filled in from the
hand-written templates below with people's names composed from a surname and given-name
characters, places from a list of Chinese cities, provinces and landmarks, and organisations
composed from a place or a made-up brand plus an organisation word (大学, 银行, 科技公司...).
No third-party corpus was used or copied.

Properties:

* deterministic: ``random.Random(seed)``; the same ``--seed`` gives byte-identical files;
* sentences are de-duplicated before splitting, so none occurs in two splits;
* about 5% of the sentences join four to six clauses and are mostly longer than 64 characters, so
  the quickstart (``model.max_length = 64``) exercises the windows over long sentences;
* organisation names often contain a place (北京大学 is one ORG, not LOC + ORG), as in real data;
* the inference example ``小明在北京大学读书`` never occurs verbatim.

Usage::

    python tools/make_ner_demo_data.py [--seed 7] [--out recipes/data/ner]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SPLITS = (("train", 1200), ("validation", 200), ("test", 200))
HELD_OUT = "小明在北京大学读书"
LONG_RATIO = 0.05

SURNAMES = list(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
)
GIVEN = list(
    "伟芳娜秀英敏静丽强磊军洋勇艳杰娟涛明超秀兰霞平刚桂英华玉萍红娥玲芬燕彬鹏辉建波宁晨阳雪琳斌浩宇欣怡子涵梓轩博文思远佳琪雨婷嘉欣志强海燕国庆春梅晓东立新"
)
PREFIXED = ["小", "老", "阿"]

CITIES = [
    "北京",
    "上海",
    "广州",
    "深圳",
    "杭州",
    "南京",
    "成都",
    "重庆",
    "武汉",
    "西安",
    "天津",
    "苏州",
    "长沙",
    "郑州",
    "青岛",
    "大连",
    "厦门",
    "昆明",
    "哈尔滨",
    "沈阳",
    "济南",
    "合肥",
    "福州",
    "南昌",
    "贵阳",
    "南宁",
    "兰州",
    "太原",
    "石家庄",
    "呼和浩特",
    "乌鲁木齐",
    "拉萨",
    "西宁",
    "银川",
    "海口",
    "三亚",
    "桂林",
    "洛阳",
    "开封",
    "扬州",
    "无锡",
    "宁波",
    "温州",
    "绍兴",
    "珠海",
    "佛山",
    "东莞",
]
REGIONS = [
    "广东",
    "浙江",
    "江苏",
    "四川",
    "湖北",
    "湖南",
    "河南",
    "河北",
    "山东",
    "山西",
    "陕西",
    "云南",
    "贵州",
    "广西",
    "福建",
    "江西",
    "安徽",
    "辽宁",
    "吉林",
    "黑龙江",
    "甘肃",
    "青海",
    "海南",
    "新疆",
    "西藏",
    "内蒙古",
    "宁夏",
    "长江",
    "黄河",
    "泰山",
    "黄山",
    "西湖",
    "珠江",
    "太湖",
    "峨眉山",
]
BRANDS = [
    "华星",
    "东方",
    "远航",
    "启明",
    "新元",
    "天工",
    "蓝海",
    "金桥",
    "恒信",
    "瑞丰",
    "长风",
    "中科",
    "博远",
    "鼎盛",
    "云帆",
    "晨光",
    "海川",
    "宏图",
    "万象",
    "星辰",
]
ORG_AFTER_PLACE = [
    "大学",
    "师范大学",
    "理工大学",
    "第一中学",
    "人民医院",
    "市政府",
    "图书馆",
    "博物馆",
    "银行",
    "电视台",
    "日报社",
    "交通局",
    "体育局",
    "大剧院",
    "足球俱乐部",
]
ORG_AFTER_BRAND = ["科技公司", "集团", "研究所", "出版社", "基金会", "银行", "汽车公司", "食品公司", "律师事务所"]

# {P} person, {L} place, {O} organisation; {P2}, {L2}, {O2}: a second one of the same type.
TEMPLATES = [
    "{P}在{O}读书",
    "{P}在{O}工作",
    "{P}昨天去了{L}",
    "{P}下个月要去{L}出差",
    "{P}和{P2}一起去{L}旅游",
    "{O}今天在{L}召开新闻发布会",
    "{O}宣布将在{L}设立分部",
    "{P}是{O}的工程师",
    "{P}毕业于{O}",
    "{L}的天气今天很好",
    "我们明天从{L}出发去{L2}",
    "{P}说{L}的冬天很冷",
    "{O}和{O2}签署了合作协议",
    "记者{P}从{L}发回报道",
    "{P}担任{O}的负责人",
    "{O}的{P}教授在会上发言",
    "{P}的家在{L}",
    "{L}举办了一场音乐节，吸引了很多游客",
    "{P}在{L}开了一家小店",
    "{O}向{L}的学校捐赠了图书",
    "据{O}消息，{L}将新建一座机场",
    "{P}和{P2}是大学同学",
    "{P}给{P2}打了电话",
    "{P}代表{O}参加了比赛",
    "{O}的球员{P}打进了一球",
    "上周{P}在{L}见到了{P2}",
    "{L}和{L2}之间开通了高铁",
    "{P}向{O}提交了申请",
    "{O}发布了新的产品",
    "{P}认为{O}的服务很好",
    "这次会议由{O}主办，在{L}举行",
    "{P}从{O}辞职后回到了{L}",
    "{L}是一座美丽的城市",
    "很多人喜欢去{L}看风景",
    "{P}今年考上了{O}",
    "{O}的总部设在{L}",
    "{P}是{L}人",
    "{P}在{O}做志愿者",
    "{O}邀请{P}做报告",
    "{P}住在{L}已经十年了",
]
CONNECTORS = ["，", "。", "；"]


def person(rng: random.Random) -> str:
    if rng.random() < 0.12:
        return rng.choice(PREFIXED) + rng.choice(GIVEN)
    given = rng.choice(GIVEN) + (rng.choice(GIVEN) if rng.random() < 0.6 else "")
    return rng.choice(SURNAMES) + given


def place(rng: random.Random) -> str:
    return rng.choice(CITIES) if rng.random() < 0.7 else rng.choice(REGIONS)


def organisation(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(CITIES + REGIONS[:20]) + rng.choice(ORG_AFTER_PLACE)
    return rng.choice(BRANDS) + rng.choice(ORG_AFTER_BRAND)


MAKERS = {"P": person, "L": place, "O": organisation}
TYPES = {"P": "PER", "L": "LOC", "O": "ORG"}


def clause(rng: random.Random) -> tuple[list[str], list[str]]:
    """One filled-in template as characters and BIO tags."""
    template = rng.choice(TEMPLATES)
    tokens: list[str] = []
    tags: list[str] = []
    used: dict[str, str] = {}
    i = 0
    while i < len(template):
        if template[i] == "{":
            j = template.index("}", i)
            slot = template[i + 1 : j]
            kind = slot[0]
            value = MAKERS[kind](rng)
            while slot.endswith("2") and value == used.get(kind):
                value = MAKERS[kind](rng)
            used[kind] = value
            tokens += list(value)
            tags += [f"B-{TYPES[kind]}"] + [f"I-{TYPES[kind]}"] * (len(value) - 1)
            i = j + 1
        else:
            tokens.append(template[i])
            tags.append("O")
            i += 1
    return tokens, tags


def sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    parts = 4 + rng.randrange(3) if rng.random() < LONG_RATIO else 1
    tokens: list[str] = []
    tags: list[str] = []
    for k in range(parts):
        t, g = clause(rng)
        tokens += t
        tags += g
        end = "。" if k == parts - 1 else rng.choice(CONNECTORS)
        tokens.append(end)
        tags.append("O")
    return tokens, tags


def generate(seed: int) -> dict[str, list[dict[str, list[str]]]]:
    rng = random.Random(seed)
    total = sum(n for _, n in SPLITS)
    seen: set[str] = set()
    rows = []
    while len(rows) < total:
        tokens, tags = sentence(rng)
        text = "".join(tokens)
        if text in seen or HELD_OUT in text:
            continue
        seen.add(text)
        rows.append({"tokens": tokens, "tags": tags})
    out, start = {}, 0
    for name, n in SPLITS:
        out[name] = rows[start : start + n]
        start += n
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "recipes" / "data" / "ner")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in generate(args.seed).items():
        path = args.out / f"{name}.jsonl"
        with path.open("w", encoding="utf-8", newline="\n") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"wrote {len(rows)} sentences to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
