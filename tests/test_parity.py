"""Parity: batched inference (length-sorted batches, padding, chunks) gives exactly what one input
at a time gives, for every built-in task: the same labels, entities and generated tokens, and
scores within 1e-4.  (A plain ``transformers.pipeline`` changes labels on near-ties between batch
1 and batch 32; we must not.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CLS_TEXTS, PAIRS, RECIPES, TINY_DECODER, tiny_run


def predictions(run_dir: Path, inputs: list, batch_size: int) -> tuple[list[dict], list[dict]]:
    """``(one at a time, batched with batch_size)`` from a freshly loaded predictor."""
    from nlptasks.pipeline import load_predictor

    predictor = load_predictor(run_dir)
    predictor.batch_size = 1
    one_by_one = [r for item in inputs for r in predictor([item])]
    predictor.batch_size = batch_size
    return one_by_one, predictor(inputs)


def same_scores(a: list[float], b: list[float]) -> None:
    assert a == pytest.approx(b, abs=1e-4)


@pytest.mark.parametrize("batch_size", [3, 64])
def test_cls(runs, batch_size):
    run_dir = _cached(runs, "cls", lambda: tiny_run(runs, "cls.toml", "cls", "data.max_train_rows=300"))
    one, batched = predictions(run_dir, CLS_TEXTS, batch_size)
    assert [r["text"] for r in batched] == CLS_TEXTS
    assert [r["label"] for r in batched] == [r["label"] for r in one]
    same_scores([r["score"] for r in batched], [r["score"] for r in one])


def test_ner(runs):
    run_dir = _cached(runs, "ner", lambda: tiny_run(runs, "ner.toml", "ner", "data.max_train_rows=300"))
    long = "张伟在华星科技公司工作，后来去了北京大学读书。" * 6  # windowed: longer than max_length
    texts = ["小明在北京大学读书", long, "", "李娜去了杭州", {"tokens": list("王芳在上海")}, long[:70], "张"]
    one, batched = predictions(run_dir, texts, 4)
    for a, b in zip(batched, one, strict=True):
        assert a["text"] == b["text"]
        assert [(e["type"], e["start"], e["end"]) for e in a["entities"]] == [
            (e["type"], e["start"], e["end"]) for e in b["entities"]
        ]
        same_scores([e["score"] for e in a["entities"]], [e["score"] for e in b["entities"]])
        assert a.get("tags") == b.get("tags")


def test_pair_cross_encoder(runs):
    run_dir = _cached(runs, "cross", lambda: tiny_run(runs, "pair.toml", "cross", "data.max_train_rows=400"))
    one, batched = predictions(run_dir, PAIRS, 4)
    assert [r["label"] for r in batched] == [r["label"] for r in one]
    same_scores([r["score"] for r in batched], [r["score"] for r in one])


def test_pair_bi_encoder_and_ranking(runs):
    run_dir = _cached(
        runs, "bi", lambda: tiny_run(runs, "pair.toml", "bi", "options.mode=bi", "data.max_train_rows=400")
    )
    one, batched = predictions(run_dir, PAIRS, 4)
    assert [r.get("label") for r in batched] == [r.get("label") for r in one]
    same_scores([r["similarity"] for r in batched], [r["similarity"] for r in one])

    from nlptasks.pipeline import load_predictor

    predictor = load_predictor(run_dir)
    candidates = [b for _, b in PAIRS]
    queries = [a for a, _ in PAIRS]
    predictor.batch_size = 1
    ranked_one = predictor.rank(queries, candidates, top_k=3)
    predictor.batch_size = 5
    ranked = predictor.rank(queries, candidates, top_k=3)
    for a, b in zip(ranked, ranked_one, strict=True):
        assert [c["candidate"] for c in a["results"]] == [c["candidate"] for c in b["results"]]
        same_scores([c["similarity"] for c in a["results"]], [c["similarity"] for c in b["results"]])


def test_sft_generation(runs):
    """Left-padded, length-sorted batches generate the same tokens as one prompt at a time."""
    import json

    rows = [
        json.loads(line) for line in (RECIPES / "data" / "sft" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    data = runs / "sft24.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[:24]), encoding="utf-8")
    run_dir = _cached(
        runs,
        "sft",
        lambda: tiny_run(  # memorizes its 24 rows: real answers to compare
            runs,
            "sft.toml",
            "sft",
            "peft.method=none",
            f"data.train={data}",
            f"data.validation={data}",
            "data.test=",
            "train.batch_size=8",
            "options.generation_eval.rows=2",
            "options.generation_eval.max_new_tokens=4",
            tiny=TINY_DECODER,
            epochs=40,
        ),
    )
    prompts = [{k: r[k] for k in ("instruction", "input")} for r in rows[:10]] + ["你好", "湖畔酒店几点可以入住？"]
    from nlptasks.pipeline import load_predictor

    predictor = load_predictor(run_dir)
    predictor.configure_generation(max_new_tokens=16)
    predictor.batch_size = 1
    one = [predictor([p])[0] for p in prompts]
    predictor.batch_size = 5
    batched = predictor(prompts)
    assert [r["response"] for r in batched] == [r["response"] for r in one]
    assert sum(len(r["response"]) > 3 for r in one) >= 3, one  # real answers, not just a stop token


_RUNS: dict[str, Path] = {}


def _cached(runs: Path, key: str, make) -> Path:  # noqa: ANN001
    """Train each run once per module (the parametrized cls test asks twice)."""
    if key not in _RUNS or not _RUNS[key].exists():
        _RUNS[key] = make()
    return _RUNS[key]


def test_cpu_batches_end_where_padding_would_pass_the_budget():
    """What a server gathers is of mixed lengths: on a CPU a batch of CUT_TOKENS or more ends before
    an input that would make its padding more than PAD_BUDGET of its tokens; short batches are not
    cut (small matrix products cost more per token); on a GPU batches are batch_size long."""
    from nlptasks.inference.forward import CUT_TOKENS, length_batches

    lengths = [10] * 30 + [40] * 10 + [3]
    cpu = length_batches(lengths, 32, cpu=True)
    assert [len(b) for b in cpu] == [31, 10]  # 3 and the 10s (310 tokens), then the 40s
    assert [lengths[i] for b in cpu for i in b] == sorted(lengths)
    assert sorted(i for b in cpu for i in b) == list(range(len(lengths)))
    assert [len(b) for b in length_batches(lengths, 32, cpu=False)] == [32, 9]
    short = [4] * 16 + [8] * 16  # 64 tokens before the 8s: below CUT_TOKENS, kept whole
    assert 4 * 16 < CUT_TOKENS and [len(b) for b in length_batches(short, 32, cpu=True)] == [32]
    assert all(len(b) <= 4 for b in length_batches(lengths, 4, cpu=True))
    assert length_batches([], 8, cpu=True) == []
