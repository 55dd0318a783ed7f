"""The ``mlm`` task: .txt files as rows, the blocks and the masking, a run through the CLI (metrics,
fill-mask inference, eval = run), exact resume with masks drawn anew each batch, the data doctor,
and cls / ner / pair runs that start from an mlm run (its encoder and its vocabulary)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import RECIPES, crashed_copy, read_metrics, tiny_run

QUICKSTART = RECIPES / "mlm.toml"
DEMO_TEXTS = RECIPES / "data" / "cls" / "train.csv"


# -- reading and masking ---------------------------------------------------------------------------


def test_a_txt_file_is_one_text_column_numbered_by_line(tmp_path):
    from nlptasks.plugin import ROW_COLUMN, load_file

    path = tmp_path / "corpus.txt"
    path.write_text("第一段第一行\n  第一段第二行  \n\n\n第二段\n", encoding="utf-8")
    ds = load_file(str(path))
    assert ds.column_names == ["text", ROW_COLUMN]
    assert ds["text"] == ["第一段第一行", "第一段第二行", "第二段"]
    assert ds[ROW_COLUMN] == [1, 2, 5]  # blank lines are no rows, and lines keep their numbers


def test_a_txt_file_that_is_not_utf8_names_its_line(tmp_path):
    from nlptasks.plugin import DataError, load_file

    path = tmp_path / "corpus.txt"
    path.write_bytes("好的\n".encode() + "不好".encode("gbk") + b"\n")
    with pytest.raises(DataError) as caught:
        load_file(str(path))
    assert "corpus.txt:2: not UTF-8" in str(caught.value)


@pytest.mark.parametrize("concatenate", [True, False])
def test_blocks_keep_every_token_in_order(concatenate):
    from nlptasks_plugins.mlm.masking import blocks

    texts = [list(range(100, 100 + n)) for n in (3, 20, 1, 7, 0, 12)]
    out = blocks(texts, start=1, end=2, max_length=8, concatenate=concatenate)
    assert all(b[0] == 1 and len(b) <= 8 for b in out)
    body = [t for b in out for t in b[1:] if t != 2]
    assert body == [t for ids in texts for t in ids]  # nothing dropped, nothing reordered
    if concatenate:  # full blocks but the last: no padding
        assert all(len(b) == 8 for b in out[:-1])
    else:  # each block holds one text's tokens, framed
        assert all(b[-1] == 2 for b in out)


@pytest.mark.parametrize("spans", [True, False])
def test_masking_hides_the_share_asked_and_never_a_special_token(spans):
    from nlptasks_plugins.mlm.masking import mask_block

    rng = np.random.default_rng(0)
    special, mask_id = {0, 1, 2}, 3
    hidden = total = 0
    lengths: list[int] = []
    for _ in range(300):
        ids = [1, *rng.integers(10, 500, 60).tolist(), 2, *rng.integers(10, 500, 40).tolist(), 2]
        inputs, labels = mask_block(ids, special, rng, 0.15, spans, 10, mask_id, 500)
        chosen = [i for i, label in enumerate(labels) if label != -100]
        assert all(ids[i] not in special for i in chosen)
        assert all(labels[i] == ids[i] for i in chosen)  # the label is the hidden token
        assert [i for i, (a, b) in enumerate(zip(ids, inputs, strict=True)) if a != b and i not in chosen] == []
        hidden += len(chosen)
        total += 100
        run = 1
        for a, b in zip(chosen, chosen[1:], strict=False):
            if b == a + 1:
                run += 1
            else:
                lengths.append(run)
                run = 1
        lengths.append(run)
    assert hidden / total == pytest.approx(0.15, abs=0.005)
    mean_run = sum(lengths) / len(lengths)
    if spans:  # SpanBERT's geometric spans (mean 3.8 before clipping to the budget and merging)
        assert mean_run > 2.5
    else:
        assert mean_run < 1.5


def test_masking_replaces_80_percent_with_the_mask_and_10_with_other_tokens():
    from nlptasks_plugins.mlm.masking import mask_block

    rng = np.random.default_rng(1)
    as_mask = kept = other = 0
    for _ in range(400):
        ids = rng.integers(10, 1000, 100).tolist()
        inputs, labels = mask_block(ids, set(), rng, 0.15, True, 10, 3, 1000)
        for i, label in enumerate(labels):
            if label != -100:
                as_mask += inputs[i] == 3
                kept += inputs[i] == ids[i]
                other += inputs[i] not in (3, ids[i])
    n = as_mask + kept + other
    assert as_mask / n == pytest.approx(0.8, abs=0.02)
    assert other / n == pytest.approx(0.1, abs=0.02)


# -- a run -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlm_run(runs):
    return tiny_run(
        runs,
        QUICKSTART,
        "m",
        "model.max_length=64",
        "data.max_train_rows=400",
        "data.max_eval_rows=80",
        "train.learning_rate=3e-3",
        "train.batch_size=8",
        epochs=3,
    )


def test_a_run_reports_perplexity_and_masked_token_accuracy(mlm_run):
    metrics = read_metrics(mlm_run)
    for split in ("validation", "test"):
        m = metrics[split]
        assert m["perplexity"] == pytest.approx(math.exp(m["loss"]), rel=1e-6)
        assert 0 < m["accuracy"] < 1
        assert m["tokens"] > 1000
    # the model learnt something: well below a uniform guess over the vocabulary
    vocab = len(json.loads((mlm_run / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])
    assert metrics["validation"]["perplexity"] < vocab / 2, (metrics["validation"], vocab)
    assert "loaded the" not in mlm_run.err and "LOAD REPORT" not in mlm_run.err
    assert "missing keys" not in mlm_run.err  # the tied decoder is tied again, not "missing"
    assert "[MASK]" in (mlm_run.out + mlm_run.err).split("try: ")[-1]  # the command it prints fills in a mask


def test_the_run_is_a_masked_lm_plain_transformers_loads(mlm_run):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mlm_run)
    model = AutoModelForMaskedLM.from_pretrained(mlm_run).eval()
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    enc = tok("这家酒店服务很[MASK]", return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape[-1] == len(tok)


def test_infer_fills_in_masks_as_the_fill_mask_pipeline_does(mlm_run, cli):
    """The docs' promise: the candidates are the tokens and scores of pipeline("fill-mask", top_k=5)."""
    from transformers import pipeline

    texts = ["这家酒店服务很[MASK]，房间也干净", "[MASK][MASK]很差", "前台[MASK]"]
    code, out, err = cli("infer", "--model", mlm_run, *texts)
    assert code == 0, err
    answers = [json.loads(line) for line in out.splitlines()]
    assert [len(a["masks"]) for a in answers] == [1, 2, 1]
    fill = pipeline("fill-mask", model=str(mlm_run), top_k=5, device="cpu")
    for text, answer in zip(texts, answers, strict=True):
        expected = fill(text)
        per_mask = expected if isinstance(expected[0], list) else [expected]
        for got, want in zip(answer["masks"], per_mask, strict=True):
            assert [c["token"] for c in got] == [w["token_str"] for w in want]
            assert [c["score"] for c in got] == pytest.approx([w["score"] for w in want], abs=1e-5)
        assert "[MASK]" not in answer["filled"]
        if len(per_mask) == 1:  # the pipeline's sequence is the text with the best candidate
            assert answer["filled"].replace(" ", "") == per_mask[0][0]["sequence"].replace(" ", "")


def test_serve_answers_what_infer_answers(mlm_run):
    from fastapi.testclient import TestClient

    from conftest import build_app, serve_state
    from nlptasks import load

    texts = ["这家酒店服务很[MASK]", "房间[MASK]净"]
    with TestClient(build_app(serve_state({"m": mlm_run}))) as client:
        answer = client.post("/v1/predict/m", json={"inputs": texts})
        missing = client.post("/v1/predict/m", json={"inputs": ["没有遮住"]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"] == load(mlm_run)(texts)
    assert missing.status_code == 400 and "has no [MASK]" in missing.text


def test_infer_without_a_mask_names_the_input_and_shows_how(mlm_run, cli):
    code, _, err = cli("infer", "--model", mlm_run, "好[MASK]", "没有遮住的字")
    assert code != 0
    assert "input 2 has no [MASK]" in err
    assert "Traceback" not in err


def test_eval_of_the_test_file_gives_the_runs_test_figures(mlm_run, cli, tmp_path):
    """Test blocks are masked once with the recipe's seed: nlptasks eval sees the same masks."""
    lines = (RECIPES / "data" / "cls" / "test.csv").read_text(encoding="utf-8").splitlines()[:81]  # the run's 80
    test = tmp_path / "test.csv"
    test.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = cli("eval", mlm_run, "--data", test, "--output", tmp_path / "e")
    assert code == 0, err
    got = json.loads((tmp_path / "e" / "metrics.json").read_text(encoding="utf-8"))
    want = read_metrics(mlm_run)["test"]
    metrics = got["test"] if "test" in got else got
    assert metrics["loss"] == pytest.approx(want["loss"], abs=1e-4)
    assert metrics["accuracy"] == pytest.approx(want["accuracy"], abs=1e-9)
    text = tmp_path / "more.txt"  # plain text, as the docs' example
    text.write_text("\n".join(line.split(",")[0] for line in lines[1:]) + "\n", encoding="utf-8")
    code, _, err = cli("eval", mlm_run, "--data", text, "--output", tmp_path / "t")
    assert code == 0, err
    got = json.loads((tmp_path / "t" / "metrics.json").read_text(encoding="utf-8"))
    assert (got["test"] if "test" in got else got)["loss"] == pytest.approx(want["loss"], abs=1e-4)  # the same texts


def test_resume_replays_the_masks_of_the_uninterrupted_run(runs, tmp_path):
    """Training blocks are masked anew each batch from torch's random state: a run resumed from a
    checkpoint draws the masks the uninterrupted run drew, so losses and metrics are the same."""
    from nlptasks.testing import run_cli

    whole = tiny_run(
        runs,
        QUICKSTART,
        "whole",
        "model.max_length=32",
        "data.max_train_rows=200",
        "data.max_eval_rows=40",
        "train.batch_size=16",
        "output.checkpoint_steps=5",
        "output.keep_checkpoints=true",
        "train.logging_steps=2",
        epochs=2,
    )
    steps = sorted(int(p.name.split("-")[1]) for p in (whole / "checkpoints").glob("checkpoint-*"))
    step = next(s for s in steps if s % 10)  # inside an epoch
    crashed = tmp_path / "mlm" / "r"
    crashed_copy(whole, step, crashed)
    code, _, err = run_cli(*whole.argv, "--resume", crashed)
    assert code == 0, err
    assert f"from checkpoint-{step}" in err
    a, b = read_metrics(whole), read_metrics(crashed)
    assert b["train"]["loss"] == pytest.approx(a["train"]["loss"], abs=1e-6)
    for split in ("validation", "test"):
        assert b[split]["loss"] == pytest.approx(a[split]["loss"], abs=1e-6)
        assert b[split]["accuracy"] == a[split]["accuracy"]


# -- the data doctor and bad data ------------------------------------------------------------------


def test_check_names_blank_texts_overlap_and_sizes(cli, tmp_path):
    train = tmp_path / "train.txt"
    train.write_text(
        "今天天气很好\n明天也很好\n今天天气很好\n" + "".join(f"第{i}句话\n" for i in range(40)), encoding="utf-8"
    )
    validation = tmp_path / "validation.csv"
    validation.write_text('text,label\n明天也很好,1\n"   ",0\n新的一句,1\n', encoding="utf-8")
    test = tmp_path / "test.txt"
    test.write_text("另一句话\n", encoding="utf-8")
    sets = [f"data.train={train}", f"data.validation={validation}", f"data.test={test}"]
    code, out, err = cli("check", QUICKSTART, "--json", *[a for s in sets for a in ("--set", s)])
    assert code == 0, err  # warnings, no errors
    report = json.loads(out)
    checks = {(f["split"], f["check"]) for f in report["findings"]}
    assert ("train", "duplicates") in checks, checks
    assert ("validation", "overlap") in checks, checks
    assert ("validation", "empty-text") in checks, checks
    sizes = {f["split"]: f["message"] for f in report["findings"] if f["check"] == "size"}
    assert sizes["train"].startswith("43 text(s)") and sizes["test"] == "1 text(s), 4 characters", sizes


def test_a_missing_text_column_is_named_with_the_columns_there(cli, tmp_path):
    code, _, err = cli("run", QUICKSTART, "--no-progress", "--set", 'options.text_columns=["review"]')
    assert code != 0
    assert "no column 'review' (options.text_columns[0])" in err
    assert "the columns are: text, label" in err


def test_several_text_columns_each_give_texts(runs, tmp_path):
    """A pair file's two columns are both read: twice the texts of one column."""
    rows = ["text_a,text_b,label"] + [f"第{i}个问题是什么,第{i}个答案在这里,1" for i in range(60)]
    path = tmp_path / "pairs.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    run = tiny_run(
        runs,
        QUICKSTART,
        "two-columns",
        f"data.train={path}",
        f"data.validation={path}",
        f"data.test={path}",
        'options.text_columns=["text_a", "text_b"]',
        "model.max_length=32",
    )
    assert "train: 120 texts" in run.err


# -- any task starts from an mlm run ---------------------------------------------------------------


def _from_run(folder: Path, recipe: Path, mlm_dir: Path) -> Path:
    """``recipe`` with ``model.name_or_path`` the mlm run instead of its ``[model.scratch]`` table."""
    text = recipe.read_text(encoding="utf-8")
    start = text.index("[model.scratch]")
    end = text.index("\n[", start + 1)
    text = text[:start] + text[end + 1 :]
    text = text.replace("[model]\n", f"[model]\nname_or_path = {json.dumps(str(mlm_dir))}\n", 1)
    for split in ("train", "validation", "test"):
        for kind in ("cls", "ner", "pair"):
            for ext in ("csv", "jsonl"):
                text = text.replace(
                    f'"data/{kind}/{split}.{ext}"', json.dumps(str(RECIPES / "data" / kind / f"{split}.{ext}"))
                )
    path = folder / f"from-{recipe.name}"
    path.write_text(text, encoding="utf-8")
    return path


def _assert_started_from(run: Path, mlm_dir: Path, prefix: str, key: str) -> None:
    """``run`` loaded the mlm run's encoder (its weight ``prefix.key`` carried over) and vocabulary,
    with one load line and nothing rebuilt."""
    from safetensors.numpy import load_file

    assert f"loaded the mlm run {mlm_dir}" in run.err
    assert "not used: cls.predictions.*" in run.err  # the masked-LM head, and nothing of the encoder
    assert "LOAD REPORT" not in run.err and "built a" not in run.err  # no noise, no vocabulary rebuilt
    vocab = [json.loads((r / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"] for r in (run, mlm_dir)]
    assert vocab[0] == vocab[1]
    base = load_file(str(mlm_dir / "model.safetensors"))
    tuned = load_file(str(run / "model.safetensors"))
    before = base[f"{prefix}.{key}"]
    after = tuned.get(f"{prefix}.{key}", tuned.get(key))  # a bi-encoder saves the plain encoder
    # one short epoch moves the pretrained weights a little; a fresh init would be unrelated to them
    assert np.corrcoef(before.ravel(), after.ravel())[0, 1] > 0.9


@pytest.mark.parametrize("task,sets", [("cls", ()), ("ner", ()), ("pair", ()), ("pair", ("options.mode=bi",))])
def test_a_task_starts_from_the_mlm_runs_encoder_and_vocabulary(mlm_run, runs, tmp_path, task, sets):
    recipe = _from_run(tmp_path, RECIPES / f"{task}.toml", mlm_run)
    name = f"from-{task}{'-bi' if sets else ''}"
    run = tiny_run(runs, recipe, name, "model.max_length=64", "data.max_train_rows=200", *sets, tiny=())
    _assert_started_from(run, mlm_run, "bert", "embeddings.position_embeddings.weight")


def test_a_roformer_mlm_run_trains_on_hidden_tokens_and_a_task_starts_from_it(runs, tmp_path):
    """recipes/bench/mlm-zh.toml's architecture: RoFormer (rotary positions), its loss on the hidden
    tokens only, and a ner run that loads its encoder and vocabulary."""
    start = tiny_run(
        runs,
        QUICKSTART,
        "m-roformer",
        "model.scratch.architecture=roformer",
        "model.max_length=64",
        "data.max_train_rows=200",
        "data.max_eval_rows=40",
        "train.batch_size=8",
    )
    assert "training loss on the hidden tokens only (their vocabulary projection alone): " in start.err
    assert json.loads((start / "config.json").read_text(encoding="utf-8"))["model_type"] == "roformer"
    run = tiny_run(
        runs,
        _from_run(tmp_path, RECIPES / "ner.toml", start),
        "from-ner-roformer",
        "model.max_length=64",
        "data.max_train_rows=200",
        tiny=(),
    )
    _assert_started_from(run, start, "roformer", "encoder.layer.0.attention.self.query.weight")


# -- tune and --nproc, as for every task -----------------------------------------------------------


def test_tune_minimises_the_loss_and_its_best_run_reproduces(tmp_path):
    from nlptasks.testing import TINY, run_cli

    text = QUICKSTART.read_text(encoding="utf-8").replace('"data/cls/', json.dumps(str(DEMO_TEXTS.parent))[:-1] + "/")
    text += '\n[tune]\ntrials = 2\nseed = 3\n\n[tune.space]\n"options.mask_probability" = { low = 0.1, high = 0.3 }\n'
    recipe = tmp_path / "study.toml"
    recipe.write_text(text, encoding="utf-8")
    small = (*TINY, "model.max_length=32", "data.max_train_rows=80", "data.max_eval_rows=30", "train.max_steps=6")
    argv = [a for s in (*small, f"output.dir={tmp_path / 'runs'}") for a in ("--set", s)]
    code, out, err = run_cli("tune", recipe, *argv)
    assert code == 0, err
    folder = tmp_path / "runs" / "mlm" / "tune-study"
    assert "| trial | params | loss | state | seconds | note |" in out
    losses = [
        json.loads((trial / "metrics.json").read_text(encoding="utf-8"))["validation"]["loss"]
        for trial in sorted((folder / "trials").iterdir())
        if (trial / "metrics.json").exists()
    ]
    best = json.loads(((folder / "best-run").resolve() / "metrics.json").read_text(encoding="utf-8"))["validation"]
    assert len(losses) == 2 and best["loss"] == min(losses)  # the loss is minimised, not maximised


def test_two_processes_train_an_mlm_run(tmp_path):
    import os
    import sys

    from conftest import ROOT, run_process
    from nlptasks.testing import TINY

    small = (*TINY, "model.max_length=32", "data.max_train_rows=96", "data.max_eval_rows=40", "train.batch_size=8")
    command = [sys.executable, "-m", "nlptasks", "run", str(QUICKSTART), "--nproc", "2", "--no-progress"]
    command += [a for s in (*small, "train.epochs=1", f"output.dir={tmp_path}") for a in ("--set", s)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = run_process(command, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "mlm").iterdir()
    assert json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["distributed"]["world_size"] == 2
    metrics = read_metrics(run_dir)
    assert metrics["test"]["perplexity"] == pytest.approx(math.exp(metrics["test"]["loss"]), rel=1e-6)


# -- ONNX ------------------------------------------------------------------------------------------


def test_an_mlm_run_exports_to_onnx_fp32_and_refuses_int8_with_the_reason(mlm_run, cli, tmp_path):
    """fp32: the graph (checked against torch at export) answers what the run answers; its own
    eval figures are the run's.  int8 calibrates on the data rows through the predictor, which an
    mlm run refuses (no masks): the error says so and what to do instead."""
    pytest.importorskip("onnxruntime")
    import nlptasks

    out = tmp_path / "onnx"
    code, stdout, err = cli("export", mlm_run, "--onnx", out)
    assert code == 0, err
    manifest = json.loads((out / "nlptasks.json").read_text(encoding="utf-8"))
    assert "does not take the rows" in manifest["onnx"]["measured"]["note"]
    assert not (mlm_run / "deployments.json").exists()  # nothing measured: auto keeps the run's weights
    texts = ["这家酒店服务很[MASK]", "[MASK]间很干净，[MASK]也好"]
    want = nlptasks.load(mlm_run, backend="torch")(texts)
    got = nlptasks.load(out)(texts)
    assert type(nlptasks.load(out).model).__name__ == "OnnxModel"
    for a, b in zip(want, got, strict=True):
        assert a["filled"] == b["filled"]
        for x, y in zip(a["masks"], b["masks"], strict=True):
            assert [c["token"] for c in x] == [c["token"] for c in y]
            assert [c["score"] for c in x] == pytest.approx([c["score"] for c in y], abs=1e-4)
    own = json.loads((out / "metrics.json").read_text(encoding="utf-8"))  # eval of the export on the test file
    code, _, err = cli(
        "eval", mlm_run, "--data", own["measured"]["file"], "--backend", "torch", "--output", tmp_path / "e"
    )
    assert code == 0, err
    torch_eval = json.loads((tmp_path / "e" / "metrics.json").read_text(encoding="utf-8"))["test"]
    assert own["test"]["loss"] == pytest.approx(torch_eval["loss"], abs=1e-4)
    assert own["test"]["accuracy"] == torch_eval["accuracy"]

    code, _, err = cli("export", mlm_run, "--onnx", tmp_path / "int8", "--quantize", "int8")
    assert code != 0 and "Traceback" not in err
    assert "refuses row 1" in err and "has no [MASK]" in err and "--quantize none" in err


# -- the loss on the hidden tokens only ------------------------------------------------------------


def _tiny_masked_lm(kind: str = "bert"):
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)
    sizes = {"bert": {}, "distilbert": {"dim": 32, "n_layers": 1, "n_heads": 2, "hidden_dim": 64}}[kind]
    base = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    config = AutoConfig.for_model(kind, vocab_size=300, **(sizes or base))
    return AutoModelForMaskedLM.from_config(config)


def _batch():
    import torch

    ids = torch.randint(5, 300, (3, 20))
    labels = torch.full_like(ids, -100)
    labels[:, 3:6] = ids[:, 3:6]
    labels[1, 10] = ids[1, 10]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def test_the_loss_on_hidden_tokens_only_is_the_models_loss_and_gradient():
    import torch

    from nlptasks_plugins.mlm.loss import encoder_and_head, masked_only_loss, matching_loss

    model, inputs = _tiny_masked_lm(), _batch()
    parts = encoder_and_head(model)
    assert parts is not None and parts[1] is model.cls
    assert matching_loss(model, parts, inputs, {})[0] == "mean"
    count = int((inputs["labels"] != -100).sum())
    # BERT's loss is the mean whatever num_items_in_batch says (gradient accumulation): so is ours
    assert matching_loss(model, parts, inputs, {"num_items_in_batch": torch.tensor(count * 2)})[0] == "mean"
    model.eval()
    full = model(**inputs).loss
    full.backward()
    want = model.bert.embeddings.word_embeddings.weight.grad.clone()
    model.zero_grad()
    fast = masked_only_loss(parts, inputs)
    fast.backward()
    assert float(fast) == pytest.approx(float(full), rel=1e-5)
    got = model.bert.embeddings.word_embeddings.weight.grad
    assert torch.allclose(got, want, atol=1e-6)  # the tied decoder's gradient included


def test_a_model_of_another_shape_keeps_its_own_forward():
    from nlptasks_plugins.mlm.loss import encoder_and_head

    assert encoder_and_head(_tiny_masked_lm("distilbert")) is None  # its head is four modules


def test_a_run_says_which_loss_it_trains_on(mlm_run):
    assert "training loss on the hidden tokens only (their vocabulary projection alone): " in mlm_run.err
