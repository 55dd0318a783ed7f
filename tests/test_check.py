"""``nlptasks check``: the data doctor finds every defect seeded into small files, per task.

Each test writes a little data with known defects (rows numbered as errors number them: csv data
rows from 1, header excluded; jsonl by line),
runs ``nlptasks check --json`` through the CLI and asserts that each seeded defect is reported,
with its level, split and rows, and that clean data gets no error.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import RECIPES, SHARED_DATA, TINY
from nlptasks import Finding, hookimpl
from nlptasks.pipeline import check, load_recipe
from nlptasks.testing import plugin_host


def doctor(cli, recipe: Path, *sets: str) -> tuple[int, dict, str]:
    argv = ["check", str(recipe), "--json"]
    for s in (*TINY, *sets):
        argv += ["--set", s]
    code, out, err = cli(*argv)
    return code, (json.loads(out) if out.strip() else {}), err


def found(report: dict, check_id: str, split: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["check"] == check_id and (split is None or f["split"] == split)]


def one(report: dict, check_id: str, split: str | None = None) -> dict:
    hits = found(report, check_id, split)
    assert len(hits) == 1, (check_id, split, report["findings"])
    return hits[0]


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> str:
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", ["cls", "ner", "pair", "sft", "mlm"])
def test_the_quickstart_data_is_clean(cli, name):
    code, report, err = doctor(cli, RECIPES / f"{name}.toml")
    assert code == 0, err
    assert report["ok"] and not [f for f in report["findings"] if f["level"] != "info"], report["findings"]
    assert set(report["sizes"]) == {"train", "validation", "test"}
    if name == "mlm":  # texts are cut into blocks, not truncated: each split's size instead
        assert {f["split"] for f in found(report, "size")} == {"train", "validation", "test"}
    else:
        assert found(report, "truncation")  # every split says what max_length cuts, even when nothing


def test_cls_seeded_defects(cli, tmp_path):
    good = [[f"好评第{i}条，房间干净服务周到", "正面"] for i in range(60)] + [
        [f"差评第{i}条，又脏又吵", "负面"] for i in range(3)
    ]
    train = good + [
        ["", "正面"],  # row 64: empty text
        ["   ", "负面"],  # row 65: whitespace only
        ["好评第1条，房间干净服务周到", "正面"],  # row 66: duplicate of row 2
        ["好评第2条，房间干净服务周到", "负面"],  # row 67: same text as row 3, other label
        ["没有标签的一行", ""],  # row 68: no label
    ]
    validation = [
        ["差评第0条，又脏又吵", "负面"],  # row 1: also in train
        ["一般般吧", "中性"],  # row 2: a label train lacks
        ["很好" * 100, "正面"],
    ]  # row 3: longer than max_length
    test = [["全新的句子", "正面"], ["另一句", "负面"]]
    header = ["text", "label"]
    sets = [
        f"data.train={write_csv(tmp_path / 'train.csv', header, train)}",
        f"data.validation={write_csv(tmp_path / 'validation.csv', header, validation)}",
        f"data.test={write_csv(tmp_path / 'test.csv', header, test)}",
        "model.max_length=64",
    ]
    code, report, _ = doctor(cli, RECIPES / "cls.toml", *sets)
    assert code == 1 and not report["ok"]
    assert one(report, "empty-text", "train")["rows"] == [64, 65]
    assert "1 empty and 1 whitespace-only" in one(report, "empty-text", "train")["message"]
    assert one(report, "empty-label", "train")["rows"] == [68]
    assert one(report, "duplicates", "train")["rows"] == [66, 67]
    assert one(report, "conflicting-duplicates", "train")["rows"] == [67]
    assert one(report, "overlap", "validation")["rows"] == [1]
    unknown = one(report, "unknown-labels", "validation")
    assert unknown["level"] == "error" and unknown["rows"] == [2] and "'中性'" in unknown["message"]
    assert one(report, "imbalance", "train")["level"] == "warning"
    assert one(report, "truncation", "validation")["rows"] == [3]
    assert not found(report, "overlap", "test") and not found(report, "unknown-labels", "test")


def test_text_output_lists_errors_first_and_says_what_next(cli, tmp_path):
    header = ["text", "label"]
    rows = [["好", "a"], ["坏", "b"]] * 3
    sets = [
        f"data.train={write_csv(tmp_path / 'train.csv', header, rows)}",
        f"data.validation={write_csv(tmp_path / 'v.csv', header, [['新', 'c']])}",
        f"data.test={write_csv(tmp_path / 't.csv', header, [['好', 'a']])}",
    ]
    argv = ["check", str(RECIPES / "cls.toml")] + [x for s in (*TINY, *sets) for x in ("--set", s)]
    code, out, _ = cli(*argv)
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith("check ") and "train 6, validation 1, test 1 rows" in lines[0]
    levels = [line.split(":")[0] for line in lines[1:-1]]
    assert levels == sorted(levels, key=["error", "warning", "info"].index)
    assert lines[1].startswith("error: [unknown-labels]") and "v.csv" in lines[1] and "(rows 1)" in lines[1]
    assert "[overlap]" in out and "t.csv" in out
    assert lines[-1].startswith("1 error(s)") and "nlptasks run" in lines[-1]


def test_ner_seeded_defects(cli, tmp_path):
    def sent(chars: str, tags: list[str]) -> dict:
        return {"tokens": list(chars), "tags": tags}

    train = [sent("小明在北京", ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]) for _ in range(2)]  # line 2 repeats 1
    train += [
        sent("王芳去上海", ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]),
        sent("他在杭州", ["O", "O", "I-LOC", "I-LOC"]),  # line 4: I-LOC after O
        sent("长" * 80, ["B-LOC"] + ["I-LOC"] * 79),  # line 5: longer than max_length
    ]
    validation = [
        sent("王芳去上海", ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]),  # line 1: also in train
        sent("苹果公司", ["B-ORG", "I-ORG", "I-ORG", "I-ORG"]),
    ]  # line 2: ORG unknown to train
    test = [sent("李雷在广州", ["B-PER", "I-PER", "O", "X-LOC", "I-LOC"])]  # line 1: not a BIO tag
    sets = [
        f"data.train={write_jsonl(tmp_path / 'train.jsonl', train)}",
        f"data.validation={write_jsonl(tmp_path / 'validation.jsonl', validation)}",
        f"data.test={write_jsonl(tmp_path / 'test.jsonl', test)}",
        "model.max_length=32",
        "options.overflow=truncate",
    ]
    code, report, _ = doctor(cli, RECIPES / "ner.toml", *sets)
    assert code == 1
    transitions = one(report, "invalid-transitions", "train")
    assert transitions["rows"] == [4] and transitions["level"] == "warning"  # the recipe repairs them
    assert one(report, "bad-tags", "test")["rows"] == [1]
    unknown = one(report, "unknown-labels", "validation")
    assert unknown["level"] == "error" and unknown["rows"] == [2] and "'ORG'" in unknown["message"]
    assert one(report, "duplicates", "train")["rows"] == [2]
    assert one(report, "overlap", "validation")["rows"] == [1]
    cut = one(report, "truncation", "train")
    assert cut["rows"] == [5] and cut["level"] == "warning" and "gold labels" in cut["message"]
    assert "; 0 of" not in cut["message"]  # truncate mode loses the gold labels past the cut

    code, report, _ = doctor(cli, RECIPES / "ner.toml", *sets[:-1], "options.invalid_transition=error")
    assert one(report, "invalid-transitions", "train")["level"] == "error"
    cut = one(report, "truncation", "train")  # windows (the default) lose nothing
    assert cut["rows"] == [5] and cut["level"] == "info" and "; 0 of" in cut["message"]


def test_pair_seeded_defects(cli, tmp_path):
    header = ["text_a", "text_b", "label"]
    train = [[f"问题{i}", f"回答{i}", i % 2] for i in range(20)] + [
        ["怎么退款", "", 1],  # row 21: empty side
        ["回答3", "问题3", 0],  # row 22: row 4 in the other order (a duplicate pair)
    ]
    validation = [["回答7", "问题7", 1]]  # row 1: a train pair, reversed
    test = [["全新的问题", "全新的回答", 0]]
    sets = [
        f"data.train={write_csv(tmp_path / 'train.csv', header, train)}",
        f"data.validation={write_csv(tmp_path / 'validation.csv', header, validation)}",
        f"data.test={write_csv(tmp_path / 'test.csv', header, test)}",
    ]
    code, report, _ = doctor(cli, RECIPES / "pair.toml", *sets)
    assert code == 1  # bad_rows = "error": a run would stop on the empty side
    empty = one(report, "empty-text", "train")
    assert empty["rows"] == [21] and empty["level"] == "error"
    assert one(report, "duplicates", "train")["rows"] == [22]
    assert one(report, "conflicting-duplicates", "train")["rows"] == [22]  # row 4 has label 1
    assert one(report, "overlap", "validation")["rows"] == [1]

    code, report, _ = doctor(cli, RECIPES / "pair.toml", *sets, "options.bad_rows=skip")
    assert code == 0 and one(report, "empty-text", "train")["level"] == "warning"


LONG = "".join(chr(0x4E00 + 37 * i) for i in range(60))  # 60 different characters, each seen once


def test_sft_seeded_defects(cli, tmp_path):
    train = [{"instruction": f"问题{i}", "input": "", "output": f"答案{i}"} for i in range(20)]
    train += [
        {"instruction": "没有答案的问题", "input": "", "output": ""},  # line 21: nothing to learn
        {"instruction": "问题3", "input": "", "output": "另一个答案"},  # line 22: prompt of line 4 again
        {"instruction": LONG, "input": "", "output": "短答"},  # line 23: the prompt fills max_length
    ]
    validation = [{"instruction": "问题5", "input": "", "output": "答案5"}]  # line 1: also in train
    test = [{"instruction": "新问题", "input": "", "output": "新答案"}]
    sets = [
        f"data.train={write_jsonl(tmp_path / 'train.jsonl', train)}",
        f"data.validation={write_jsonl(tmp_path / 'validation.jsonl', validation)}",
        f"data.test={write_jsonl(tmp_path / 'test.jsonl', test)}",
        "model.max_length=48",
        "model.scratch.min_frequency=1",
        "model.scratch.vocab_size=300",
    ]
    code, report, _ = doctor(cli, RECIPES / "sft.toml", *sets)
    assert code == 1
    malformed = one(report, "malformed", "train")
    assert malformed["rows"] == [21] and "empty 'output'" in malformed["message"]
    assert one(report, "duplicates", "train")["rows"] == [22]
    assert one(report, "conflicting-duplicates", "train")["rows"] == [22]
    assert one(report, "overlap", "validation")["rows"] == [1]
    away = one(report, "response-cut-away", "train")
    assert away["rows"] == [23] and away["level"] == "error"
    assert 23 in one(report, "truncation", "train")["rows"]


def test_unreadable_data_is_one_error_naming_file_and_line(cli, tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["b"], "tags": \n', encoding="utf-8")
    code, report, _ = doctor(cli, RECIPES / "ner.toml", f"data.train={bad}")
    assert code == 1
    (finding,) = report["findings"]
    assert (
        finding["check"] == "load" and "train.jsonl" in finding["message"] and ":2: invalid JSON" in finding["message"]
    )


def test_chnsenticorp_dirty_rows_are_found(cli):
    """Real data: dirty.csv holds 20 source rows, one with an empty review, the others also in the splits."""
    data = SHARED_DATA / "chnsenticorp"
    if not data.exists():
        pytest.skip("../shared/data is not here")
    code, report, _ = doctor(
        cli,
        RECIPES / "cls.toml",
        f"data.train={data / 'train.csv'}",
        f"data.validation={data / 'dirty.csv'}",
        f"data.test={data / 'test.csv'}",
    )
    assert code == 0
    assert len(one(report, "empty-text", "validation")["rows"]) == 1
    shared = one(report, "overlap", "validation")["rows"]
    assert 10 <= len(shared) <= 19  # rows of dirty.csv that went to train (the rest to validation/test)
    assert report["sizes"] == {"train": 6212, "validation": 20, "test": 777}


def test_a_plugin_adds_findings_through_the_hook():
    class Policy:
        """A cross-cutting plugin: flags any text containing an e-mail address."""

        @hookimpl
        def nlptasks_check(self, ctx, data):
            rows = [i + 1 for i, t in enumerate(data["train"]["text"]) if "@" in t]
            return [Finding("warning", "pii", "e-mail addresses in the text", "train", rows)]

    host = plugin_host(builtins=True)
    host.register(Policy(), name="policy")
    loaded = load_recipe(RECIPES / "cls.toml", TINY, host=host)
    report = check(loaded, host=host)
    assert [f.check for f in report.findings if f.check == "pii"] == ["pii"]
    assert any(f.check == "truncation" for f in report.findings)  # the task's own checks still run
