"""Every run records its non-padding tokens/s, padding fraction and an MFU estimate
(``nlptasks/engine/throughput.py``); ``compare`` and the run's summary show them."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import RECIPES, read_metrics, tiny_run


def _train_texts() -> list[str]:
    with (RECIPES / "data" / "cls" / "train.csv").open(encoding="utf-8", newline="") as fh:
        return [row["text"] for row in csv.DictReader(fh)]


def test_tokens_are_the_training_tokens_and_grouping_lowers_padding(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("NLPTASKS_PEAK_TFLOPS", "0.5")
    grouped = tiny_run(tmp_path / "runs", "cls.toml", "t", "train.group_by_length=true", epochs=2)
    train = read_metrics(grouped)["train"]
    tokenizer = AutoTokenizer.from_pretrained(str(grouped))
    expected = sum(len(ids) for ids in tokenizer(_train_texts(), truncation=True, max_length=64)["input_ids"])
    assert train["tokens"] == 2 * expected  # every training token of both epochs, no padding counted
    assert train["tokens_per_second"] == pytest.approx(train["tokens"] / train["runtime"], rel=1e-3)
    assert 0 <= train["padding_fraction"] < 0.5
    assert train["peak_source"] == "environment" and train["peak_tflops"] == 0.5
    assert 0 < train["mfu"] < 1

    random_order = tiny_run(tmp_path / "random", "cls.toml", "random", "train.group_by_length=false", epochs=2)
    shuffled = read_metrics(random_order)["train"]
    assert shuffled["tokens"] == train["tokens"]
    assert shuffled["padding_fraction"] > train["padding_fraction"] + 0.05  # what length grouping saves


def test_summary_and_compare_show_throughput(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("NLPTASKS_PEAK_TFLOPS", "0.5")
    a = tiny_run(tmp_path / "runs", "cls.toml", "t", "train.max_steps=3", epochs=None)
    code, out, err = cli("compare", a, a)
    assert code == 0, err
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert "train tokens/s" in rows and "padding fraction" in rows and "MFU (estimate)" in rows
    tps = read_metrics(a)["train"]["tokens_per_second"]
    assert f"{tps:.0f}" in rows["train tokens/s"]
    assert "tokens/s" in (a / "README.md").read_text(encoding="utf-8")


def test_batch_tokens_counts_every_side_and_packed_batches():
    import torch
    from transformers import BatchEncoding

    from nlptasks.engine.training.throughput import batch_tokens

    pair = {  # a bi-encoder batch: both sides, each with its mask
        "input_ids": torch.ones(2, 5, dtype=torch.long),
        "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]),
        "b_input_ids": torch.ones(2, 3, dtype=torch.long),
        "b_attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]]),
        "labels": torch.tensor([0, 1]),
    }
    assert batch_tokens(pair) == (8 + 3, 10 + 6)
    packed = BatchEncoding({"input_ids": torch.ones(1, 7, dtype=torch.long), "position_ids": torch.arange(7)[None]})
    assert batch_tokens(packed) == (7, 7)
    assert batch_tokens([1, 2]) == (0, 0)


def test_nonembedding_parameters_leave_out_embedding_tables():
    from transformers import BertConfig, BertModel

    from nlptasks.engine.training.throughput import nonembedding_parameters

    model = BertModel(
        BertConfig(
            vocab_size=500,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    )
    emb = model.embeddings
    tables = sum(
        p.numel()
        for m in (emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings)
        for p in m.parameters()
    )
    assert nonembedding_parameters(model) == sum(p.numel() for p in model.parameters()) - tables


def test_measured_peak_is_cached_and_keeps_the_best(tmp_path, monkeypatch):
    from nlptasks.engine.training import throughput

    monkeypatch.delenv("NLPTASKS_PEAK_TFLOPS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    speeds = iter([2e11, 3e11, 1e11, 9e11])
    monkeypatch.setattr(throughput, "_time_matmul", lambda dtype, device, n=2048: next(speeds))
    seen = [throughput.device_peak_flops("fp32") for _ in range(4)]
    assert [s[0] for s in seen] == [2e11, 3e11, 3e11, 3e11]  # the best of three, then no more timing
    assert all(s[1] == "measured" for s in seen)
    stored = json.loads((tmp_path / "nlptasks" / "peak_flops.json").read_text())
    (entry,) = stored.values()
    assert (entry["flops"], entry["measurements"]) == (3e11, 3)
    # each measurement says when, and how busy the machine was
    assert [m["flops"] for m in entry["history"]] == [2e11, 3e11, 1e11]
    assert all(m["at"].endswith("Z") and isinstance(m["load_average"], float) for m in entry["history"])
    monkeypatch.setenv("NLPTASKS_PEAK_TFLOPS", "oops")
    assert throughput.device_peak_flops("fp32") == (None, "environment (not a number)")


def test_a_real_matmul_measures_a_plausible_peak():
    from nlptasks.engine.training.throughput import _time_matmul

    flops = _time_matmul(__import__("torch").float32, "cpu", n=256)
    assert 1e8 < flops < 1e14


def test_a_run_faster_than_the_measured_peak_raises_it_instead_of_an_mfu_over_100(tmp_path, monkeypatch):
    """A peak timed on a busy machine can be below what a run then achieves: the run's figures
    never show an MFU above 1; the cached peak is raised to the run's rate and says so."""
    import torch

    from nlptasks.engine.training import throughput

    monkeypatch.delenv("NLPTASKS_PEAK_TFLOPS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if torch.cuda.is_available():
        pytest.skip("a GPU's peak comes from the table")
    monkeypatch.setattr(throughput, "_time_matmul", lambda dtype, device, n=2048: 1e6)  # a very slow timing
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    counts = {"tokens": 10_000, "slots": 12_000}
    figures = throughput.throughput_figures(counts, 1.0, model, "fp32")
    achieved = 6 * (64 * 64 + 64) * 10_000
    assert figures["mfu"] == 1.0 and figures["peak_tflops"] == round(achieved / 1e12, 3)
    assert figures["peak_source"].startswith("measured (raised to this run's own rate")
    (entry,) = json.loads((tmp_path / "nlptasks" / "peak_flops.json").read_text()).values()
    assert entry["flops"] == achieved and entry["raised_by_a_run"]["at"].endswith("Z")
    slower = throughput.throughput_figures({"tokens": 5_000, "slots": 6_000}, 1.0, model, "fp32")
    assert slower["mfu"] == 0.5 and slower["peak_source"] == "measured"
