"""Generate the small demo sentiment dataset used by the recipes.

This script writes three CSV files -- ``train.csv`` (1,200 rows),
``validation.csv`` (200 rows) and ``test.csv`` (200 rows) -- into ``--out``
(default ``recipes/data/cls``).  Each file has the header ``text,label``; the
label is ``正面`` (positive) or ``负面`` (negative), roughly 60/40.

The text is entirely synthetic and was written for this project: every review
is composed at random from the hand-written building blocks below (subjects,
aspects, evaluative phrases, negations, connectors, openings and closings).
No third-party corpus was used or copied.  The reviews imitate short Chinese
hotel / guest-house reviews with a few shop-like ones mixed in.

Properties of the generated data:

* deterministic -- ``random.Random(seed)``; running twice with the same
  ``--seed`` gives byte-identical files;
* texts are de-duplicated before splitting, so no text occurs in two splits;
* occasional negation ("不太干净", "一点也不吵") so a model has to read
  more than single characters;
* about 3% mixed reviews whose label follows the majority of clauses and the
  closing sentence;
* lengths between 8 and 120 characters, punctuation ，。！, a few digits and
  English words ("wifi", "OK");
* the sentence ``这家酒店服务很好，房间也干净`` (kept as an unseen inference
  example) never appears verbatim in any file.

Usage::

    python tools/make_demo_data.py [--seed 7] [--out recipes/data/cls]
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

POS = "正面"
NEG = "负面"

# Held-out example used in docs / inference demos; must not occur in the data.
HELD_OUT = "这家酒店服务很好，房间也干净"

SPLITS = (("train", 1200), ("validation", 200), ("test", 200))
POS_RATIO = 0.6
MIXED_RATIO = 0.03
NEGATION_RATIO = 0.15
# Share of reviews in which (almost) every clause is phrased with a negation.
NEGATION_HEAVY_RATIO = 0.15
MIN_LEN, MAX_LEN = 8, 120

# ---------------------------------------------------------------------------
# Building blocks (hand-written for this project)
# ---------------------------------------------------------------------------

SUBJECTS = [
    "这家酒店",
    "酒店",
    "宾馆",
    "这次入住",
    "客栈",
    "这家民宿",
    "这家宾馆",
    "这个酒店",
    "这家店",
    "这里",
    "民宿",
    "这家客栈",
    "这次住的酒店",
]

# Neutral openings (context only, no polarity).
OPENINGS_NEUTRAL = [
    "第一次来，",
    "出差住了两晚，",
    "带家人来玩，",
    "住了3晚，",
    "朋友推荐的，",
    "国庆假期入住，",
    "订的大床房，",
    "商务出差，",
    "周末和朋友来的，",
    "临时订的，",
    "订的双床房，",
    "来这边开会，",
    "住了1晚，",
    "陪父母出来旅游，",
    "网上订的，",
    "路过住一晚，",
    "第二次入住了，",
    "五一来玩，",
]
OPENINGS_POS = [
    "非常满意的一次入住！",
    "超出预期！",
    "惊喜！",
    "很愉快的一次体验。",
    "强烈推荐！",
    "住得很舒服。",
]
OPENINGS_NEG = [
    "失望的一次入住。",
    "踩雷了。",
    "非常糟糕的体验！",
    "后悔订了这家。",
    "很不愉快的一次体验。",
    "千万别订！",
]

CLOSINGS_POS = [
    "下次还会再来",
    "推荐入住",
    "五星好评",
    "值得推荐",
    "总体很满意",
    "会推荐给朋友的",
    "好评",
    "下次出差还住这里",
    "给5星",
    "非常推荐",
    "总体OK",
    "满意",
    "以后来这边还会选这家",
    "物超所值",
    "赞一个",
    "值得再来",
    "住得很开心",
]
CLOSINGS_NEG = [
    "再也不会来了",
    "不推荐",
    "差评",
    "大家避雷",
    "非常失望",
    "不会再住了",
    "给1星都多",
    "钱白花了",
    "别来了",
    "太失望了",
    "千万别住",
    "体验极差",
    "不会推荐给任何人",
    "后悔死了",
    "以后不会再选这家",
]

# Whole-subject evaluations: "这家酒店很不错".
SUBJECT_POS = [
    "很不错",
    "挺好的",
    "非常好",
    "总体不错",
    "真心不错",
    "很棒",
    "还不错",
    "性价比高",
    "性价比很高",
    "整体很舒服",
    "住着很舒服",
    "超赞",
]
SUBJECT_NEG = [
    "很差",
    "太差了",
    "非常糟糕",
    "很一般",
    "让人失望",
    "很差劲",
    "太坑了",
    "性价比很低",
    "体验很差",
    "住着很不舒服",
    "名不副实",
]

# Degree adverbs for positive and negative adjectives.
ADV_POS = ["很", "非常", "特别", "挺", "超级", "十分", "相当", "很", "比较"]
ADV_NEG = ["很", "非常", "特别", "有点", "超级", "十分", "太", "比较", "相当"]

# Generic adjectives usable with almost any aspect.
GENERIC_POS_ADJ = ["好", "不错", "棒"]
GENERIC_NEG_ADJ = ["差", "糟糕", "差劲", "一般"]
# Aspects where the generic adjectives above read oddly.
NO_GENERIC = {"价格", "停车", "交通"}

# aspect -> (positive adjectives, negative adjectives,
#            positive predicates, negative predicates)
# Adjectives take degree adverbs and can be negated; predicates are used as is.
ASPECTS: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "房间": (
        ["干净", "宽敞", "整洁", "舒适", "明亮", "温馨"],
        ["脏", "小", "潮湿", "昏暗", "旧", "挤"],
        ["收拾得一尘不染", "比图片上还大", "有落地窗", "布置得很用心"],
        ["有一股霉味", "和图片差距很大", "小得转不开身", "地毯上都是污渍"],
    ),
    "服务": (
        ["好", "周到", "热情", "贴心", "到位", "专业"],
        ["差", "冷漠", "敷衍", "慢", "糟糕"],
        ["让人感觉很温暖", "有求必应", "做得很细致"],
        ["态度让人生气", "叫了半天都没人理", "完全没有服务意识"],
    ),
    "早餐": (
        ["丰富", "好吃", "可口", "新鲜", "精致"],
        ["难吃", "单调", "简陋", "凉"],
        ["品种很多", "有中式也有西式", "鸡蛋是现煎的"],
        ["就几样咸菜和馒头", "八点多就没东西了", "豆浆是凉的"],
    ),
    "位置": (
        ["好", "方便", "优越", "安静"],
        ["偏", "差", "难找", "偏僻"],
        ["离地铁站很近", "在市中心", "出门就是商业街", "步行到景区只要5分钟"],
        ["离地铁站很远", "导航都找不到", "周围什么都没有", "在一条小巷子里很不好找"],
    ),
    "前台": (
        ["热情", "专业", "耐心", "友好", "高效"],
        ["冷漠", "敷衍", "慢", "不耐烦", "傲慢"],
        ["小姐姐态度超好", "办理入住很快", "还帮忙寄存了行李", "主动帮我们升级了房型"],
        ["办入住等了40分钟", "态度很差", "爱答不理的", "还多收了押金"],
    ),
    "卫生": (
        ["好", "干净", "到位", "整洁"],
        ["差", "脏", "糟糕", "堪忧"],
        ["打扫得很干净", "做得很到位", "方面无可挑剔"],
        ["一塌糊涂", "让人无法接受", "做得很差", "方面问题很大"],
    ),
    "隔音": (
        ["好", "不错", "棒"],
        ["差", "糟糕", "差劲"],
        ["做得很好", "效果很好", "关上窗外面一点声音都没有"],
        ["太差了", "隔壁说话都听得见", "走廊的声音听得一清二楚", "半夜被吵醒好几次"],
    ),
    "床": (
        ["舒服", "软", "大", "干净", "舒适"],
        ["硬", "小", "脏", "不舒服"],
        ["睡得很香", "软硬适中", "睡起来很舒服", "一觉睡到天亮"],
        ["一动就吱吱响", "床单上有污渍", "睡得腰疼", "被子有股怪味"],
    ),
    "价格": (
        ["实惠", "便宜", "合理", "公道", "亲民"],
        ["贵", "高", "离谱", "坑"],
        ["很划算", "在这个地段很良心", "比别家便宜不少"],
        ["完全不值", "比旁边贵了一倍", "节假日翻了三倍"],
    ),
    "交通": (
        ["方便", "便利", "便捷"],
        ["不便", "麻烦", "差"],
        ["出门就有公交站", "打车很方便", "去机场只要20分钟", "坐地铁两站就到火车站"],
        ["特别不方便", "很成问题", "不太方便，打车都打不到"],
    ),
    "设施": (
        ["齐全", "新", "完善", "先进", "好"],
        ["陈旧", "老化", "简陋", "旧", "差"],
        ["都很新", "该有的都有", "配有健身房和洗衣房", "很齐全，电视还可以投屏"],
        ["很多都坏了", "用起来很糟心", "都是十几年前的", "比较老旧"],
    ),
    "网络": (
        ["快", "稳定", "流畅", "好"],
        ["慢", "卡", "差", "不稳定"],
        ["wifi信号很好", "wifi速度很快", "开视频会议也不卡", "每个角落都有wifi"],
        ["wifi经常断", "wifi根本连不上", "网页都打不开", "信号时有时无"],
    ),
    "空调": (
        ["给力", "安静", "好用", "凉快"],
        ["吵", "差", "难用", "不给力"],
        ["制冷很快", "温度调得很舒服", "开一会儿就暖和了"],
        ["开了半小时还是不凉", "一直在滴水", "噪音很大", "根本不制冷"],
    ),
    "浴室": (
        ["干净", "宽敞", "明亮", "舒服"],
        ["脏", "小", "潮湿", "滑"],
        ["热水很足", "24小时都有热水", "水压很大", "洗漱用品很齐全"],
        ["没有热水", "下水道堵了", "水一会儿冷一会儿热", "地漏有异味"],
    ),
    "停车": (
        ["方便", "容易"],
        ["难", "不便", "贵", "麻烦"],
        ["有免费停车场", "车位很多", "地下车库很大"],
        ["根本没有车位", "停一晚收80块", "只能停在路边"],
    ),
    "餐厅": (
        ["好吃", "干净", "实惠", "不错", "卫生"],
        ["难吃", "贵", "脏", "差"],
        ["菜的味道很地道", "上菜很快", "厨师手艺很好"],
        ["上菜等了一个小时", "菜都是凉的", "吃完肚子不舒服"],
    ),
    "环境": (
        ["好", "安静", "优美", "清幽", "舒服"],
        ["差", "吵", "乱", "嘈杂"],
        ["闹中取静", "院子里种满了花", "推开窗就能看到海"],
        ["楼下就是夜市", "周围都在施工", "到处都是烟味"],
    ),
    "装修": (
        ["新", "漂亮", "精致", "有格调", "时尚"],
        ["旧", "土", "陈旧", "简陋", "过时"],
        ["很有设计感", "风格很温馨", "看得出很用心"],
        ["墙皮都掉了", "还有很大的油漆味", "很有年代感"],
    ),
    "服务员": (
        ["热情", "勤快", "礼貌", "细心", "耐心"],
        ["冷漠", "懒", "粗鲁", "不耐烦"],
        ["主动帮忙拿行李", "笑容很亲切", "随叫随到"],
        ["一直在玩手机", "叫了好几次都不来", "说话很冲"],
    ),
    "电梯": (
        ["快", "新", "干净", "方便"],
        ["慢", "旧", "挤", "脏"],
        ["等几秒就来了", "刷卡就能用"],
        ["要等好久", "只有一部", "经常坏"],
    ),
    "老板": (
        ["热情", "好客", "实在", "热心", "友善"],
        ["冷淡", "抠门", "凶", "不讲理"],
        ["人特别好", "给我们推荐了很多好玩的地方", "送了我们一盘水果"],
        ["一直催我们退房", "态度很凶", "说好的接送也没来"],
    ),
    "窗外风景": (
        ["美", "漂亮", "好", "开阔"],
        ["差", "一般", "压抑"],
        ["能看到江景", "晚上夜景特别美"],
        ["对着一堵墙", "窗户正对着别人家"],
    ),
}

# Negation templates.  A positive adjective negated gives a negative clause,
# a negative adjective negated gives a positive clause.
NEGATE_POS_ADJ = ["不太{a}", "不够{a}", "不怎么{a}", "没有想象中{a}", "并不{a}", "一点也不{a}"]
NEGATE_NEG_ADJ = ["一点也不{a}", "一点都不{a}", "不算{a}", "并不{a}", "没有想象中{a}", "也不{a}"]
# Negative adjectives that read naturally after a negation.
NEGATABLE_NEG = {
    "脏",
    "小",
    "吵",
    "贵",
    "慢",
    "旧",
    "挤",
    "差",
    "偏",
    "难找",
    "偏僻",
    "冷漠",
    "硬",
    "高",
    "麻烦",
    "卡",
    "难吃",
    "潮湿",
    "简陋",
    "凉",
    "陈旧",
    "乱",
    "敷衍",
    "嘈杂",
    "冷淡",
    "凶",
    "糟糕",
    "难",
}
# Positive adjectives that read naturally after a negation.
NEGATABLE_POS = {
    "干净",
    "宽敞",
    "整洁",
    "舒适",
    "明亮",
    "好",
    "周到",
    "热情",
    "丰富",
    "好吃",
    "新鲜",
    "方便",
    "专业",
    "耐心",
    "友好",
    "舒服",
    "软",
    "大",
    "实惠",
    "便宜",
    "便利",
    "齐全",
    "新",
    "快",
    "稳定",
    "好用",
    "安静",
    "漂亮",
    "精致",
    "礼貌",
    "热心",
    "美",
    "可口",
    "贴心",
    "凉快",
    "合理",
    "流畅",
}

# Free-standing clauses that are not tied to a single aspect.
FREE_POS = [
    "性价比很高",
    "物超所值",
    "和网上的图片一样",
    "入住体验很好",
    "各方面都很满意",
    "check in很快",
    "服务OK",
    "细节做得很好",
    "住得很安心",
    "有种回家的感觉",
    "每天都有人打扫",
    "房间里一根头发都没有",
    "孩子也很喜欢",
    "老人住着也很满意",
    "比五星酒店还舒服",
    "这个价格能住到这样很满足了",
]
FREE_NEG = [
    "性价比太低",
    "完全不值这个价",
    "和网上的图片差距太大",
    "入住体验很差",
    "订的时候说有窗，结果没有窗",
    "半夜还有人敲门推销",
    "退房的时候还被查房查了半天",
    "押金到现在都没退",
    "说好的免费升级也没有",
    "一晚上都没睡好",
    "房间里有蟑螂",
    "投诉了也没人管",
    "check in等了一个多小时",
    "床上有头发",
    "垃圾桶都没倒",
    "马桶上有污渍",
    "桌子上都是灰",
    "电视打不开",
    "插座都不能用",
]

CONNECTORS = ["，", "，", "，", "，而且", "，另外", "，还有", "。", "，并且", "！", "，同时"]
CONTRASTS = ["，但是", "，不过", "，可惜", "，就是", "，只是", "。但是"]
MIXED_SUMMARY_POS = [
    "总体来说还是不错的",
    "瑕不掩瑜",
    "整体还是值得推荐",
    "其他都挺好",
    "总的来说还是满意的",
]
MIXED_SUMMARY_NEG = [
    "总体来说很失望",
    "整体体验很差",
    "其他方面也不怎么样",
    "总的来说不推荐",
    "真的很失望",
]
END_PUNCT = ["", "。", "！", "", "。", "！！", "~"]


# ---------------------------------------------------------------------------
# Composition
# ---------------------------------------------------------------------------


def aspect_clause(rng: random.Random, aspect: str, positive: bool, later: bool, negation_ratio: float) -> str:
    """One clause about ``aspect`` with the given polarity."""
    pos_adj, neg_adj, pos_pred, neg_pred = ASPECTS[aspect]
    also = "也" if later and rng.random() < 0.3 else ""

    if rng.random() < negation_ratio:
        # Negate an adjective of the opposite polarity.
        if positive:
            cands = [a for a in neg_adj if a in NEGATABLE_NEG]
            templates = NEGATE_NEG_ADJ
        else:
            cands = [a for a in pos_adj if a in NEGATABLE_POS]
            templates = NEGATE_POS_ADJ
        if cands:
            tpl = rng.choice(templates)
            if also and "也" in tpl:
                also = ""
            return aspect + also + tpl.format(a=rng.choice(cands))

    r = rng.random()
    if r < 0.25:
        pred = rng.choice(pos_pred if positive else neg_pred)
        return aspect + pred  # "也" reads oddly before most predicates
    if r < 0.35 and aspect not in NO_GENERIC:
        adj = rng.choice(GENERIC_POS_ADJ if positive else GENERIC_NEG_ADJ)
    else:
        adj = rng.choice(pos_adj if positive else neg_adj)
    if positive:
        adv = rng.choice(ADV_POS + ([""] if len(adj) > 1 else []))
        if adj == "不错" and adv in ("超级", "比较", "相当", "十分"):
            adv = "很"
        return aspect + also + adv + adj
    if rng.random() < 0.3:
        return aspect + also + "太" + adj + "了"
    adv = rng.choice(ADV_NEG + ([""] if len(adj) > 1 else []))
    if adv == "太":
        return aspect + also + "太" + adj + "了"
    return aspect + also + adv + adj


def clauses_for(rng: random.Random, polarities: list[bool], negation_ratio: float) -> list[str]:
    """Clauses (one per polarity) about distinct aspects or free-standing remarks."""
    aspects = rng.sample(sorted(ASPECTS), k=len(polarities))
    out = []
    for i, (aspect, pol) in enumerate(zip(aspects, polarities, strict=True)):
        if rng.random() < 0.1:
            out.append(rng.choice(FREE_POS if pol else FREE_NEG))
        else:
            out.append(aspect_clause(rng, aspect, pol, later=i > 0, negation_ratio=negation_ratio))
    return out


def join_clauses(rng: random.Random, clauses: list[str]) -> str:
    text, prev = clauses[0], ""
    for c in clauses[1:]:
        conn = rng.choice(CONNECTORS)
        if conn == prev and conn not in ("，", "。"):
            conn = "，"
        text += conn + c
        prev = conn
    return text


def head(rng: random.Random, positive: bool) -> tuple[str, bool]:
    """Opening + subject.  Returns (text, subject_is_bare) -- a bare subject is
    directly followed by the first aspect clause ("这家酒店服务很好")."""
    opening = ""
    r = rng.random()
    if r < 0.25:
        opening = rng.choice(OPENINGS_NEUTRAL)
    elif r < 0.35:
        opening = rng.choice(OPENINGS_POS if positive else OPENINGS_NEG)
    r = rng.random()
    if r < 0.45:
        return opening + rng.choice(SUBJECTS), True
    if r < 0.7:
        subj = rng.choice(SUBJECTS)
        ev = rng.choice(SUBJECT_POS if positive else SUBJECT_NEG)
        return opening + subj + ev + rng.choice(["，", "。", "！"]), False
    return opening, False


def closing(rng: random.Random, positive: bool, prob: float) -> str:
    if rng.random() < prob:
        return rng.choice(["，", "。", "！"]) + rng.choice(CLOSINGS_POS if positive else CLOSINGS_NEG)
    return ""


def plain_review(rng: random.Random, positive: bool) -> str:
    """A review whose clauses all share one polarity."""
    start, _bare = head(rng, positive)
    n = rng.choices([1, 2, 3, 4, 5, 6, 7], weights=[26, 30, 20, 11, 6, 4, 3])[0]
    heavy = rng.random() < NEGATION_HEAVY_RATIO
    body = join_clauses(rng, clauses_for(rng, [positive] * n, 0.85 if heavy else NEGATION_RATIO))
    text = start + body + closing(rng, positive, 0.2 if heavy else 0.45)
    return text + rng.choice(END_PUNCT)


def mixed_review(rng: random.Random, positive: bool) -> str:
    """A harder review: clauses of both polarities.  The label follows the
    majority of clauses and the (always present) final summary/closing."""
    n_major = rng.choice([2, 2, 3])
    major = clauses_for(rng, [positive] * n_major, NEGATION_RATIO)
    minor = clauses_for(rng, [not positive], NEGATION_RATIO)[0]
    start, _bare = head(rng, positive) if rng.random() < 0.5 else ("", False)
    if rng.random() < 0.5:
        # Majority first, then the contrasting clause, then a summary.
        body = join_clauses(rng, major) + rng.choice(CONTRASTS) + minor
        summary = rng.choice(MIXED_SUMMARY_POS if positive else MIXED_SUMMARY_NEG)
        body += rng.choice(["，", "。"]) + summary
    else:
        # Minority first ("虽然…"), then the majority.
        body = "虽然" + minor + "，但是" + join_clauses(rng, major)
    text = start + body
    text += rng.choice(["，", "。", "！"]) + rng.choice(CLOSINGS_POS if positive else CLOSINGS_NEG)
    return text + rng.choice(END_PUNCT)


def generate(seed: int) -> dict[str, list[tuple[str, str]]]:
    """Generate unique reviews and split them, stratified by label."""
    rng = random.Random(seed)
    quota = {name: round(n * POS_RATIO) for name, n in SPLITS}
    need = {POS: sum(quota.values()), NEG: sum(n for _, n in SPLITS) - sum(quota.values())}
    seen: set[str] = set()
    pools: dict[str, list[str]] = {POS: [], NEG: []}
    while len(pools[POS]) < need[POS] or len(pools[NEG]) < need[NEG]:
        positive = rng.random() < POS_RATIO
        label = POS if positive else NEG
        if len(pools[label]) >= need[label]:
            continue
        if rng.random() < MIXED_RATIO:
            text = mixed_review(rng, positive)
        else:
            text = plain_review(rng, positive)
        if not (MIN_LEN <= len(text) <= MAX_LEN):
            continue
        # De-duplicate across everything before splitting.
        if HELD_OUT in text or text in seen:
            continue
        seen.add(text)
        pools[label].append(text)
    out: dict[str, list[tuple[str, str]]] = {}
    taken = {POS: 0, NEG: 0}
    for name, n in SPLITS:
        counts = {POS: quota[name], NEG: n - quota[name]}
        rows = []
        for label, k in counts.items():
            rows += [(t, label) for t in pools[label][taken[label] : taken[label] + k]]
            taken[label] += k
        rng.shuffle(rows)
        out[name] = rows
    return out


def write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["text", "label"])
        w.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("recipes/data/cls"))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in generate(args.seed).items():
        path = args.out / f"{name}.csv"
        write_csv(path, rows)
        n_pos = sum(1 for _, lab in rows if lab == POS)
        print(f"{path}: {len(rows)} rows ({n_pos} {POS}, {len(rows) - n_pos} {NEG})")


if __name__ == "__main__":
    main()
