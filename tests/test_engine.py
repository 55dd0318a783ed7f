"""Engine parts on their own: file readers, stratified splits, from-scratch tokenizers, metrics."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from conftest import shared, write_csv
from nlptasks.engine.data.reading import read_rows
from nlptasks.engine.data.splitting import stratified_indices
from nlptasks.errors import DataError
from nlptasks.recipe import ScratchConfig


def test_csv_keeps_values_as_written_and_handles_quotes(tmp_path):
    path = write_csv(tmp_path / "a.csv", [('他说"好",很好', "0"), ("x,y", "1")])
    rows = read_rows(path, "csv")
    assert rows == [{"text": '他说"好",很好', "label": "0"}, {"text": "x,y", "label": "1"}]


def test_csv_with_an_extra_field_names_the_row(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("text,label\n好,1\n好,坏,1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"a\.csv:2: 3 fields, the header has 2"):
        read_rows(path, "csv")


def test_json_list_and_jsonl(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([{"text": "a", "label": 1}]), encoding="utf-8")
    assert read_rows(tmp_path / "a.json", "json") == [{"text": "a", "label": 1}]
    (tmp_path / "a.jsonl").write_text('{"text": "a"}\n\n[1]\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"a\.jsonl:3: each line must be a JSON object"):
        read_rows(tmp_path / "a.jsonl", "jsonl")


def test_the_real_dirty_file_loads_with_its_empty_row():
    rows = read_rows(shared("chnsenticorp") / "dirty.csv", "csv")
    assert len(rows) == 20
    assert sum(1 for r in rows if not r["text"].strip()) == 1
    assert '"' in rows[0]["text"]


def test_stratified_split_keeps_class_proportions_and_is_deterministic():
    labels = ["a"] * 700 + ["b"] * 300
    parts = stratified_indices(labels, len(labels), {"validation": 0.1, "test": 0.1}, seed=1)
    assert parts == stratified_indices(labels, len(labels), {"validation": 0.1, "test": 0.1}, seed=1)
    assert parts != stratified_indices(labels, len(labels), {"validation": 0.1, "test": 0.1}, seed=2)
    assert Counter(labels[i] for i in parts["validation"]) == {"a": 70, "b": 30}
    assert Counter(labels[i] for i in parts["test"]) == {"a": 70, "b": 30}
    together = sorted(parts["train"] + parts["validation"] + parts["test"])
    assert together == list(range(1000))


def test_datasets_folder_loads(tmp_path):
    from datasets import Dataset

    from nlptasks.engine.data.reading import load_file

    Dataset.from_dict({"text": ["a", "b"], "label": ["x", "y"]}).save_to_disk(str(tmp_path / "ds"))
    assert load_file(str(tmp_path / "ds")).column_names == ["text", "label"]


@pytest.mark.parametrize("kind", ["char", "wordpiece", "bpe"])
def test_scratch_tokenizers_round_trip_through_save_and_auto_tokenizer(tmp_path, kind):
    import csv

    from transformers import AutoTokenizer

    from nlptasks.engine.data.tokenization import build_tokenizer

    with (shared("chnsenticorp") / "train.csv").open(encoding="utf-8") as fh:
        texts = [row["text"] for row in csv.DictReader(fh)][:1500]
    tok = build_tokenizer(texts, ScratchConfig(tokenizer=kind, vocab_size=3000), 64)
    assert 100 < len(tok) <= 3000
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    sample = "这家酒店服务很好，房间也干净"
    assert again(sample)["input_ids"] == tok(sample)["input_ids"]
    ids = tok(sample)["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.unk_token_id not in ids
    pair = tok("好", "坏")
    assert pair["token_type_ids"][-1] == 1


@pytest.mark.parametrize("kind", ["char", "wordpiece", "bpe"])
@pytest.mark.parametrize("vocab_size", [300, 2000])
def test_a_scratch_vocabulary_is_the_same_every_time_it_is_built(kind, vocab_size):
    """tokenizers' WordPiece trainer alone gives a different vocabulary on each build of the same
    texts (it numbers the ``##`` pieces in hash order: huggingface/tokenizers#1794); ours may not."""
    import json

    from conftest import GOEMOTIONS
    from nlptasks.engine.data.tokenization import build_tokenizer

    with (GOEMOTIONS / "train.jsonl").open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh][:600]
    config = ScratchConfig(tokenizer=kind, vocab_size=vocab_size, min_frequency=2)
    built = [build_tokenizer(texts, config, 64) for _ in range(4)]
    assert all(b.get_vocab() == built[0].get_vocab() for b in built[1:])
    assert len(built[0]) <= vocab_size
    sample = "Unbelievably kind of you, thanks!!"
    assert all(b(sample)["input_ids"] == built[0](sample)["input_ids"] for b in built)


def test_char_vocabulary_is_exactly_the_characters_seen_often_enough():
    from nlptasks.engine.data.tokenization import SPECIALS, build_tokenizer

    tok = build_tokenizer(["好好 坏", "好坏 差"], ScratchConfig(tokenizer="char", min_frequency=2), 16)
    assert set(tok.get_vocab()) == {*SPECIALS, "好", "坏"}
    assert tok.convert_ids_to_tokens(tok("好差")["input_ids"]) == ["[CLS]", "好", "[UNK]", "[SEP]"]


def test_classification_report():
    from nlptasks.metrics import classification_report

    report = classification_report([0, 1, 1, 0], [0, 1, 0, 0], ["neg", "pos"])
    assert report["accuracy"] == 0.75
    assert report["precision/pos"] == 0.5 and report["recall/pos"] == 1.0
    assert report["f1/neg"] == pytest.approx(0.8)
    assert report["f1_macro"] == pytest.approx((0.8 + 2 / 3) / 2)
    assert report["support/neg"] == 3


def test_trainer_logs_become_readable_lines():
    from nlptasks.engine.training.trainer import describe_log

    assert (
        describe_log({"loss": 0.66, "grad_norm": 0.78, "learning_rate": 0.0003276, "epoch": 0.2128}, 20, 282)
        == "step 20/282 (epoch 0.21): loss 0.6600, learning_rate 3.3e-04"
    )
    evaluation = {"eval_loss": 0.41, "eval_accuracy": 0.8273, "eval_f1/0": 0.7, "eval_runtime": 1.2, "epoch": 2.0}
    assert describe_log(evaluation, 100, 282) == "validation (epoch 2): loss 0.4100, accuracy 0.8273"
    assert describe_log({"test_loss": 0.5, "test_accuracy": 0.8}, 282, 282) == "test: loss 0.5000, accuracy 0.8000"
    done = {"train_runtime": 58.2, "train_samples_per_second": 156.3, "train_loss": 0.5, "epoch": 3.0}
    assert describe_log(done, 282, 282) == "training done: 58 s, 156.3 samples/s"
    assert describe_log({"total_flos": 1.0, "epoch": 1.0}, 1, 2) is None


def test_hub_code_path_with_a_local_dataset_folder(tmp_path):
    """``data.hub`` goes through ``datasets.load_dataset`` exactly as for a hub id; a local folder
    with ``train.csv`` and ``dev.csv`` takes the same path offline ("dev" becomes validation)."""
    import shutil

    from conftest import RECIPES, tiny_run

    folder = tmp_path / "hubdata"
    folder.mkdir()
    shutil.copy(RECIPES / "data" / "cls" / "train.csv", folder / "train.csv")
    shutil.copy(RECIPES / "data" / "cls" / "validation.csv", folder / "dev.csv")
    run_dir = tiny_run(
        tmp_path / "runs",
        "cls.toml",
        "t",
        "data.train=''",
        "data.validation=''",
        "data.test=''",
        f"data.hub={json.dumps(str(folder))}",
        "data.max_train_rows=300",
    )
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert set(metrics) >= {"train", "validation"}  # dev.csv became the validation split
    assert metrics["validation"]["samples_per_second"] > 0
    assert "test" not in metrics  # no test file, and a given validation split means no test carved out


def test_a_carved_split_that_would_be_empty_is_an_error(cli, tmp_path):
    from conftest import RECIPES, TINY

    data = write_csv(tmp_path / "train.csv", [("好", "a"), ("坏", "b"), ("很好", "a"), ("很坏", "b")] * 2)
    argv = ["run", str(RECIPES / "cls.toml"), "--no-progress"]
    for s in [*TINY, f"data.train={data}", "data.validation=''", "data.test=''", f"output.dir={tmp_path}"]:
        argv += ["--set", s]
    code, _, err = cli(*argv)
    assert code == 2
    assert "data.split.validation: 0.1 of 8 training rows, split per class of 'label' leaves no rows" in err
    assert "--set data.split.stratify=false" in err


# --- evaluation outputs of any rank, gathered over batches of different padded lengths ---------------


def test_batches_join_with_every_axis_padded():
    import numpy as np

    from nlptasks.engine.training.gathering import join_batches, pad_concatenate

    a = np.ones((2, 3, 4, 4), dtype=np.float32)  # (batch, types, tokens, tokens) at length 4
    b = np.full((1, 3, 6, 6), 2.0, dtype=np.float32)  # a later batch at length 6
    joined = pad_concatenate([a, b])
    assert joined.shape == (3, 3, 6, 6) and joined.dtype == np.float32
    assert (joined[:2, :, :4, :4] == 1).all() and (joined[:2, :, 4:, :] == -100).all()
    assert (joined[:2, :, :, 4:] == -100).all() and (joined[2] == 2).all()
    same = pad_concatenate([np.zeros((2, 5)), np.ones((3, 5))])  # equal later axes: a plain concatenation
    assert same.shape == (5, 5) and (same[2:] == 1).all()
    # the structure of a batch's output is kept: tuples, dicts, None
    batches = [(a, {"x": np.zeros(2)}, None), (b, {"x": np.ones(1)}, None)]
    logits, extra, nothing = join_batches(batches)
    assert logits.shape == (3, 3, 6, 6) and extra["x"].tolist() == [0, 0, 1] and nothing is None
    assert join_batches(np.zeros(3)).shape == (3,)  # not a list of batches: as it is
    with pytest.raises(ValueError, match="different ranks"):
        pad_concatenate([np.zeros((1, 2)), np.zeros((1, 2, 3))])
