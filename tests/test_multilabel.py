"""Multi-label classification, built into ``cls`` (``options.multi_label``): the metrics against
scikit-learn, thresholds chosen on validation and used everywhere after (test, eval, infer,
serve, ``nlptasks.load``, ONNX), the override at inference, the model card, plain transformers,
labels written as JSON lists or joined in csv, and the data doctor."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import GOEMOTIONS, crashed_copy, multilabel_recipe, read_metrics, tiny_run

# -- the metrics --------------------------------------------------------------------------------------


def _random_case(seed: int, n: int = 300, labels: int = 6):
    rng = np.random.default_rng(seed)
    gold = rng.random((n, labels)) < rng.uniform(0.05, 0.5, labels)
    probs = np.clip(gold * rng.uniform(0.1, 0.5) + rng.random((n, labels)) * 0.7, 0, 1)
    return probs, gold.astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multilabel_report_agrees_with_scikit_learn(seed):
    from sklearn.metrics import accuracy_score, f1_score, jaccard_score, precision_score, recall_score

    from nlptasks.plugin import multilabel_report

    probs, gold = _random_case(seed)
    cuts = np.linspace(0.3, 0.6, gold.shape[1])
    pred = (probs >= cuts).astype(int)
    names = [f"l{j}" for j in range(gold.shape[1])]
    out = multilabel_report(probs, gold, names, cuts)
    y = gold.astype(int)
    assert out["f1_micro"] == pytest.approx(f1_score(y, pred, average="micro", zero_division=0))
    assert out["f1_macro"] == pytest.approx(f1_score(y, pred, average="macro", zero_division=0))
    assert out["precision_micro"] == pytest.approx(precision_score(y, pred, average="micro", zero_division=0))
    assert out["recall_macro"] == pytest.approx(recall_score(y, pred, average="macro", zero_division=0))
    assert out["exact_match"] == pytest.approx(accuracy_score(y, pred))  # subset accuracy
    assert out["jaccard"] == pytest.approx(jaccard_score(y, pred, average="samples", zero_division=1))
    per_label = f1_score(y, pred, average=None, zero_division=0)
    for j, name in enumerate(names):
        assert out[f"f1/{name}"] == pytest.approx(per_label[j])
        assert out[f"support/{name}"] == y[:, j].sum()
        assert out[f"threshold/{name}"] == pytest.approx(cuts[j])


def test_chosen_thresholds_are_each_labels_best_and_rare_labels_take_the_global_one():
    from nlptasks.plugin import choose_thresholds, multilabel_report

    probs, gold = _random_case(3)
    gold[:, -1] = 0
    gold[:3, -1] = 1  # 3 examples: fewer than min_support
    chosen = choose_thresholds(probs, gold, min_support=5)
    names = [f"l{j}" for j in range(gold.shape[1])]
    grid = [round(0.05 * i, 2) for i in range(1, 20)]
    for j in range(gold.shape[1] - 1):  # no grid value gives the label a better F1 than its own
        f1 = [multilabel_report(probs, gold, names, t)[f"f1/l{j}"] for t in grid]
        mine = multilabel_report(probs, gold, names, chosen["per_label"][j])[f"f1/l{j}"]
        assert mine == pytest.approx(max(f1))
    assert chosen["fallback"] == [gold.shape[1] - 1]
    assert chosen["per_label"][-1] == chosen["global"]
    micro = [multilabel_report(probs, gold, names, t)["f1_micro"] for t in grid]
    assert multilabel_report(probs, gold, names, chosen["global"])["f1_micro"] == pytest.approx(max(micro))
    # and on the split they were chosen on, per-label thresholds never do worse than 0.5 label by label
    tuned = multilabel_report(probs, gold, names, chosen["per_label"])
    fixed = multilabel_report(probs, gold, names, 0.5)
    assert all(tuned[f"f1/l{j}"] >= fixed[f"f1/l{j}"] - 1e-12 for j in range(gold.shape[1] - 1))


@pytest.mark.parametrize(
    ("cell", "labels"),
    [
        ("joy|love", ["joy", "love"]),
        (" joy | love |joy", ["joy", "love"]),
        (["joy", "love", "joy"], ["joy", "love"]),
        ([1, 2.0], ["1", "2"]),
        ("", []),
        (None, []),
        (float("nan"), []),
        ([], []),
        ("joy", ["joy"]),
    ],
)
def test_a_labels_cell_is_a_list_or_joined_labels(cell, labels):
    from nlptasks_plugins.cls.multilabel import parse_labels

    assert parse_labels(cell, "|") == labels


# -- a run through the CLI ----------------------------------------------------------------------------

_RUN: dict[str, Path] = {}


def _run(runs: Path) -> Path:
    if "run" not in _RUN or not _RUN["run"].exists():
        _RUN["run"] = tiny_run(runs, multilabel_recipe(runs), "ml", tiny=(), epochs=None)
    return _RUN["run"]


def _test_rows(limit: int = 300) -> list[dict]:
    with (GOEMOTIONS / "test.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for _, line in zip(range(limit), fh, strict=False)]


def _gold(rows: list[dict], labels: list[str]) -> np.ndarray:
    return np.array([[float(name in row["labels"]) for name in labels] for row in rows])


def test_a_run_chooses_thresholds_on_validation_and_test_is_scored_with_them(runs):
    run_dir = _run(runs)
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    metrics = read_metrics(run_dir)
    labels = manifest["labels"]
    assert len(labels) == 28 and manifest["multi_label"] is True
    record = manifest["thresholds"]
    assert record["mode"] == "per_label" and record["chosen_on"] == "validation" and record["examples"] == 300
    assert set(record["per_label"]) == set(labels)
    assert all(0 < t < 1 for t in record["per_label"].values())
    assert set(record["global_for"]) <= set(labels) and record["global_for"]  # GoEmotions has rare labels
    for name in record["global_for"]:
        assert record["per_label"][name] == record["global"]
    test = metrics["test"]
    for key in ("f1_micro", "f1_macro", "exact_match", "jaccard", "f1_macro_untuned", "precision/joy"):
        assert key in test, key
    for name in labels:
        assert test[f"threshold/{name}"] == pytest.approx(record["per_label"][name])
    # The figures are those of the predictor's answers on the test file: what infer gives is what was scored.
    import nlptasks

    rows = _test_rows()
    answers = nlptasks.load(run_dir)(rows)
    predicted = np.array([[float(name in a["labels"]) for name in labels] for a in answers])
    gold = _gold(rows, labels)
    tp = (predicted * gold).sum()
    micro = 2 * tp / (predicted.sum() + gold.sum())
    assert test["f1_micro"] == pytest.approx(micro, abs=1e-6)
    for answer in answers:
        assert set(answer) == {"text", "labels", "scores"}
        assert answer["labels"] == [n for n in labels if answer["scores"][n] >= record["per_label"][n]]
    card = (run_dir / "README.md").read_text(encoding="utf-8")
    assert "## Per label (test)" in card and "| label | precision | recall | f1 | support | threshold |" in card
    assert "## Thresholds" in card and "Chosen on the validation split (300 examples)" in card
    assert f"| test | {test['f1_macro_untuned']:.4f} | {test['f1_macro']:.4f} |" in card


def test_the_tuned_thresholds_beat_one_half_on_validation(runs):
    """The choice is made to maximise each label's F1 on validation (0.5 is on the grid): there, it
    cannot lose to 0.5 label by label.  (That the model learns is the quickstart's figure:
    recipes/goemotions-minilm.toml in the figures tier; this tiny one barely does on 28 labels.)"""
    validation = read_metrics(_run(runs))["validation"]
    assert validation["f1_macro"] >= validation["f1_macro_untuned"]
    labels = json.loads((_run(runs) / "nlptasks.json").read_text(encoding="utf-8"))["labels"]
    rare = set(json.loads((_run(runs) / "nlptasks.json").read_text(encoding="utf-8"))["thresholds"]["global_for"])
    assert labels and rare < set(labels)


def test_eval_gives_the_run_figures_and_lists_wrong_label_sets(runs, cli, tmp_path):
    run_dir = _run(runs)
    sample = tmp_path / "test.jsonl"
    rows = _test_rows()
    sample.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    own = ("--backend", "torch")  # the run's own weights as it scored them, not a bf16 its end-of-run timing chose
    code, _, err = cli("eval", run_dir, "--data", sample, "--output", tmp_path / "eval", *own)
    assert code == 0, err
    scored = json.loads((tmp_path / "eval" / "metrics.json").read_text(encoding="utf-8"))["test"]
    test = read_metrics(run_dir)["test"]
    for key in ("f1_micro", "f1_macro", "exact_match", "jaccard", "loss"):
        assert scored[key] == pytest.approx(test[key], rel=1e-5), key
    errors = [json.loads(line) for line in (tmp_path / "eval" / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == round((1 - test["exact_match"]) * len(rows))
    for e in errors:
        gold = set(rows[e["row"] - 1]["labels"])  # jsonl rows are numbered by line
        assert set(e["gold"]) == gold != set(e["predicted"])
        assert set(e["missed"]) == gold - set(e["predicted"]) and set(e["extra"]) == set(e["predicted"]) - gold
    # --set options.threshold=... scores the same run at one fixed threshold
    code, _, err = cli(
        "eval", run_dir, "--data", sample, "--output", tmp_path / "fixed", "--set", "options.threshold=0.3", *own
    )
    assert code == 0, err
    fixed = json.loads((tmp_path / "fixed" / "metrics.json").read_text(encoding="utf-8"))["test"]
    assert all(fixed[k] == 0.3 for k in fixed if k.startswith("threshold/"))
    assert fixed["loss"] == pytest.approx(test["loss"], rel=1e-6)


def test_threshold_at_inference_overrides_the_runs_and_is_refused_where_nothing_uses_it(runs, cli):
    import nlptasks
    from nlptasks import NlptasksError

    run_dir = _run(runs)
    texts = [r["text"] for r in _test_rows(20)]
    low = nlptasks.load(run_dir, threshold=0.02)(texts)
    high = nlptasks.load(run_dir, threshold=0.98)(texts)
    for a, b in zip(low, high, strict=True):
        assert a["scores"] == b["scores"]
        assert a["labels"] == [n for n, p in a["scores"].items() if p >= 0.02]
        assert b["labels"] == [n for n, p in b["scores"].items() if p >= 0.98]
    code, out, err = cli("infer", "--model", run_dir, "--threshold", "0.02", texts[0])
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["labels"] == low[0]["labels"]
    single = tiny_run(runs, "cls.toml", "single", "data.max_train_rows=100")
    with pytest.raises(NlptasksError, match="single-label cls run"):
        nlptasks.load(single, threshold=0.4)


def test_a_run_loads_in_plain_transformers_with_the_same_probabilities(runs):
    import transformers

    import nlptasks

    run_dir = _run(runs)
    config = transformers.AutoConfig.from_pretrained(run_dir)
    assert config.problem_type == "multi_label_classification"
    texts = [r["text"] for r in _test_rows(12)]
    pipe = transformers.pipeline("text-classification", model=str(run_dir), top_k=None)
    ours = nlptasks.load(run_dir, backend="torch", precision="fp32")(texts)
    for theirs, mine in zip(pipe(texts), ours, strict=True):  # the pipeline applies the sigmoid itself
        assert {d["label"]: d["score"] for d in theirs} == pytest.approx(mine["scores"], abs=1e-5)


def test_batched_answers_equal_one_at_a_time(runs):
    from nlptasks.pipeline import load_predictor

    predictor = load_predictor(_run(runs))
    texts = [r["text"] for r in _test_rows(40)] + ["", "ok", "word " * 200]
    predictor.batch_size = 1
    one = [r for t in texts for r in predictor([t])]
    predictor.batch_size = 64
    batched = predictor(texts)
    for a, b in zip(one, batched, strict=True):
        assert a["labels"] == b["labels"]
        assert a["scores"] == pytest.approx(b["scores"], abs=1e-4)


def test_serve_answers_with_the_labels_and_honours_its_threshold(runs):
    from fastapi.testclient import TestClient

    import nlptasks
    from conftest import build_app
    from nlptasks import LoadOptions
    from nlptasks.serve.models import load_models
    from nlptasks.serve.state import ServerState, ServeSettings

    run_dir = _run(runs)
    texts = [r["text"] for r in _test_rows(5)]
    for threshold in (None, 0.03):
        expected = nlptasks.load(run_dir, threshold=threshold)(texts)
        models = load_models([run_dir], ["ml"], LoadOptions(threshold=threshold))
        with TestClient(build_app(ServerState(models=models, settings=ServeSettings()))) as client:
            response = client.post("/v1/predict/ml", json={"inputs": texts})
        assert response.status_code == 200, response.text
        assert [o["labels"] for o in response.json()["outputs"]] == [e["labels"] for e in expected]


def _csv_recipe(tmp_path: Path, join: str, rows: int = 600) -> Path:
    """The multi-label recipe on csv files whose labels cells are joined by ``join``."""
    recipe = multilabel_recipe(tmp_path, train_rows=rows)
    text = recipe.read_text(encoding="utf-8")
    for split in ("train", "validation", "test"):
        with (
            (GOEMOTIONS / f"{split}.jsonl").open(encoding="utf-8") as fh,
            (tmp_path / f"{split}.csv").open("w", encoding="utf-8", newline="") as out,
        ):
            writer = csv.writer(out)
            writer.writerow(["text", "labels"])
            for line in fh:
                row = json.loads(line)
                writer.writerow([row["text"], join.join(row["labels"])])
        text = text.replace((GOEMOTIONS / f"{split}.jsonl").as_posix(), (tmp_path / f"{split}.csv").as_posix())
    recipe.write_text(text, encoding="utf-8")
    return recipe


def test_csv_labels_joined_by_a_separator_train_like_json_lists(runs, tmp_path):
    """The same rows, written as csv with 'a;b' cells (options.separator), give the same run."""
    recipe = _csv_recipe(tmp_path, ";")
    sets = ("train.epochs=1", "train.eval_strategy=no", "train.keep_best=false")
    from_csv = read_metrics(tiny_run(tmp_path / "runs", recipe, "csv", "options.separator=;", *sets, tiny=()))
    from_json = read_metrics(tiny_run(tmp_path / "runs", multilabel_recipe(tmp_path / "j"), "json", *sets, tiny=()))
    for key in ("f1_macro", "f1_micro", "loss"):
        assert from_csv["test"][key] == pytest.approx(from_json["test"][key], abs=1e-6), key


@pytest.mark.parametrize("join", [";", ",", "/", "、"])
def test_labels_joined_by_another_separator_are_refused_with_the_row(cli, tmp_path, join):
    """'a;b' cells read with the default separator '|' trained one label per combination, exit 0
    (14 combined labels, exact match 0.01): refused at the first such row, with the separator to set."""
    recipe = _csv_recipe(tmp_path, join)
    run = tiny_run(tmp_path / "runs", recipe, "wrong", "train.max_steps=1", tiny=(), exit_code=2)
    assert "look like a list joined by" in run.err and repr(join) in run.err, run.err
    assert "train.csv:" in run.err and "options.separator=" in run.err  # the file and its row
    assert not (tmp_path / "runs" / "cls" / "wrong" / "COMPLETE").exists()
    code, out, err = cli("check", recipe)
    assert code != 0 and "look like a list joined by" in out + err, out + err
    # with options.separator set, the same files train (test_csv_labels_joined_by_a_separator_train_like_json_lists)


@pytest.mark.parametrize(
    ("rows", "found"),
    [
        ([["服务;房间"], ["服务"], ["房间;价格"]], (";", 0)),
        ([["a"], ["b,c"], ["c,d"]], (",", 1)),
        ([["Arts/Entertainment"], ["Science/Tech"], ["Sports"]], None),  # one label each, its own name
        ([["a;b"]], None),  # one such label: nothing to compare it with
        ([["joy"], ["fear"], ["joy", "fear"]], None),
    ],
)
def test_a_list_in_another_separator_is_told_from_labels_that_hold_the_character(rows, found):
    from nlptasks_plugins.cls.separators import list_in_another_separator

    assert list_in_another_separator(rows, "|") == found


def test_a_fixed_threshold_chooses_nothing(runs, tmp_path):
    run_dir = tiny_run(
        tmp_path, multilabel_recipe(tmp_path), "fixed", "options.threshold=0.4", "train.epochs=1", tiny=()
    )
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["thresholds"] == {"mode": "fixed", "global": 0.4}
    test = read_metrics(run_dir)["test"]
    assert {v for k, v in test.items() if k.startswith("threshold/")} == {0.4}


def test_check_reports_label_sets_rows_without_labels_and_co_occurrence(cli, tmp_path):
    rows = [
        {"text": "great, thanks", "labels": ["joy", "gratitude"]},
        {"text": "thanks a lot", "labels": ["gratitude", "joy"]},
        {"text": "meh", "labels": []},
        {"text": "so sad", "labels": ["sadness"]},
        {"text": "scary stuff", "labels": ["fear"]},
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 4), encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]), encoding="utf-8")
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'task = "cls"\n[data]\ntrain = "{tmp_path}/train.jsonl"\nvalidation = "{tmp_path}/train.jsonl"\n'
        f'test = "{tmp_path}/test.jsonl"\n[model.scratch]\nlayers = 1\nhidden = 32\nheads = 2\nintermediate = 64\n'
        '[options]\nlabel_column = "labels"\nmulti_label = true\n',
        encoding="utf-8",
    )
    code, out, err = cli("check", recipe)
    assert "Traceback" not in err
    assert "4 of 20 row(s) have no label" in out
    assert "label(s) with no example in test: fear, sadness" in out
    assert "8 of 20 row(s) have several labels; most frequent pairs: gratitude+joy 8" in out
    # the same file in a single-label recipe: refused by check and run, with the way out
    (tmp_path / "r1.toml").write_text(
        recipe.read_text(encoding="utf-8").replace("multi_label = true\n", ""), encoding="utf-8"
    )
    code, out, _ = cli("check", tmp_path / "r1.toml")
    assert code != 0 and "hold a list of labels" in out and "options.multi_label" in out


def test_an_onnx_export_keeps_the_thresholds_and_scores_its_label_sets(runs, cli, tmp_path):
    pytest.importorskip("onnxruntime")
    import nlptasks

    run_dir = _run(runs)
    out = tmp_path / "onnx"
    code, _, err = cli("export", run_dir, "--onnx", out, "--check-rows", "200")
    assert code == 0, err
    manifest = json.loads((out / "nlptasks.json").read_text(encoding="utf-8"))
    run_manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["thresholds"] == run_manifest["thresholds"]
    gold = manifest["onnx"]["measured"]["gold"]["labels"]  # label sets against the file's lists
    assert gold["items"] == 200 and abs(gold["change_points"]) <= 1.0
    rows = _test_rows(200)  # a row counts as right when its label set is the file's
    answers = nlptasks.load(run_dir, backend="torch", precision="fp32")(rows)
    exact = sum(set(a["labels"]) == set(r["labels"]) for a, r in zip(answers, rows, strict=True)) / len(rows)
    assert gold["torch"] == pytest.approx(exact)
    texts = [r["text"] for r in _test_rows(30)]
    torch_answers = nlptasks.load(run_dir, backend="torch", precision="fp32")(texts)
    onnx_answers = nlptasks.load(out)(texts)
    assert sum(a["labels"] != b["labels"] for a, b in zip(torch_answers, onnx_answers, strict=True)) <= 1
    # the export's figures are its own, measured as nlptasks eval measures them
    own = read_metrics(out)["test"]
    assert own["f1_macro"] == pytest.approx(read_metrics(run_dir)["test"]["f1_macro"], abs=0.02)
    assert all(own[f"threshold/{n}"] == pytest.approx(t) for n, t in run_manifest["thresholds"]["per_label"].items())


def test_the_export_comparison_counts_label_sets_and_skips_other_shapes():
    from nlptasks.pipeline.onnx import compare_results

    rows = [{"labels": ["b", "a"]}, {"labels": ["c"]}, {"labels": []}]
    torch_answers = [{"labels": ["a", "b"]}, {"labels": ["c", "a"]}, {"labels": []}]
    onnx_answers = [{"labels": ["a", "b"]}, {"labels": ["c"]}, {"labels": []}]
    gold = compare_results(rows, torch_answers, onnx_answers)["gold"]["labels"]
    assert (gold["torch"], gold["onnx"], gold["items"]) == (pytest.approx(2 / 3), 1.0, 3)
    # labels joined in a csv cell are another shape: not compared (no figure rather than a wrong one)
    csv_rows = [{"labels": "a|b"}, {"labels": "c"}, {"labels": ""}]
    assert "labels" not in compare_results(csv_rows, torch_answers, onnx_answers)["gold"]
    # tags, one per token, still count element by element
    tags = [{"tags": ["O", "B", "I"]}]
    gold = compare_results(tags, [{"tags": ["O", "B", "O"]}], [{"tags": ["O", "B", "O"]}])["gold"]["tags"]
    assert (gold["torch"], gold["items"]) == (pytest.approx(2 / 3), 3)


# -- resume, tune and --nproc, as for every task ------------------------------------------------------


def test_a_resumed_run_chooses_the_thresholds_of_the_uninterrupted_one(tmp_path):

    from nlptasks.testing import run_cli

    sets = ("data.max_eval_rows=120", "output.checkpoint_steps=5", "output.keep_checkpoints=true")
    sets += ("train.eval_strategy=no", "train.keep_best=false")  # checkpoints every 5 steps, not per epoch
    whole = tiny_run(tmp_path / "runs", multilabel_recipe(tmp_path), "whole", *sets, tiny=(), epochs=None)
    steps = sorted(int(p.name.split("-")[1]) for p in (whole / "checkpoints").glob("checkpoint-*"))
    step = next(s for s in steps if s % 19)  # 19 steps an epoch (600 rows, batches of 32): inside one
    crashed = tmp_path / "crashed" / "cls" / "r"
    crashed_copy(whole, step, crashed)
    code, _, err = run_cli(*whole.argv, "--resume", crashed)
    assert code == 0, err
    assert f"from checkpoint-{step}" in err
    a, b = (json.loads((d / "nlptasks.json").read_text(encoding="utf-8"))["thresholds"] for d in (whole, crashed))
    assert a == b
    for key in ("f1_macro", "f1_micro", "loss"):
        assert read_metrics(crashed)["test"][key] == pytest.approx(read_metrics(whole)["test"][key], abs=1e-6)


def test_tune_maximises_macro_f1_at_the_chosen_thresholds(tmp_path):
    from nlptasks.testing import run_cli

    recipe = multilabel_recipe(tmp_path, train_rows=300)
    recipe.write_text(
        recipe.read_text(encoding="utf-8")
        + '\n[tune]\ntrials = 2\nseed = 3\n\n[tune.space]\n"train.learning_rate" = { low = 5e-4, high = 5e-3, log = true }\n',
        encoding="utf-8",
    )
    sets = ("data.max_eval_rows=100", "train.epochs=1", "options.labels=" + json.dumps(_all_labels()))
    argv = [a for s in (*sets, f"output.dir={tmp_path / 'runs'}") for a in ("--set", s)]
    code, out, err = run_cli("tune", recipe, *argv)
    assert code == 0, err
    folder = tmp_path / "runs" / "cls" / "tune-multilabel"  # the study is named after the recipe file
    scores = [
        json.loads((trial / "metrics.json").read_text(encoding="utf-8"))["validation"]["f1_macro"]
        for trial in sorted((folder / "trials").iterdir())
        if (trial / "metrics.json").exists()
    ]
    best = (folder / "best-run").resolve()
    assert len(scores) == 2 and read_metrics(best)["validation"]["f1_macro"] == max(scores)
    assert json.loads((best / "nlptasks.json").read_text(encoding="utf-8"))["thresholds"]["mode"] == "per_label"


def test_two_processes_train_a_multi_label_run(tmp_path):
    import os
    import sys

    from conftest import ROOT, run_process

    recipe = multilabel_recipe(tmp_path, train_rows=300)
    sets = ("data.max_eval_rows=100", "train.epochs=1", "options.labels=" + json.dumps(_all_labels()))
    command = [sys.executable, "-m", "nlptasks", "run", str(recipe), "--nproc", "2", "--no-progress"]
    command += [a for s in (*sets, f"output.dir={tmp_path / 'runs'}") for a in ("--set", s)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = run_process(command, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs" / "cls").iterdir()
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["distributed"]["world_size"] == 2
    assert manifest["thresholds"]["examples"] == 100  # validation gathered from both ranks, each row once
    test = read_metrics(run_dir)["test"]
    assert {k.split("/")[1] for k in test if k.startswith("threshold/")} == set(_all_labels())


def _all_labels() -> list[str]:
    with (GOEMOTIONS / "train.jsonl").open(encoding="utf-8") as fh:
        return sorted({label for line in fh for label in json.loads(line)["labels"]})


def test_a_new_head_starts_at_the_labels_training_rates_and_a_trained_one_is_left_alone():
    import logging
    import math
    import types

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from nlptasks_plugins.cls.multilabel import start_at_base_rates

    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, num_labels=3
    )
    rates = {"a": 0.5, "b": 0.1, "c": 0.01}
    ctx = types.SimpleNamespace(
        labels=["a", "b", "c"], manifest={"train_label_rates": rates}, log=logging.getLogger("test")
    )
    model = BertForSequenceClassification(config)
    start_at_base_rates(ctx, model)
    expected = [math.log(r / (1 - r)) for r in rates.values()]
    assert model.classifier.bias.tolist() == pytest.approx(expected, abs=1e-6)
    with torch.no_grad():  # at the start, the predicted probabilities are the rates, whatever the text
        probs = torch.sigmoid(model(input_ids=torch.tensor([[1, 5, 7, 2]])).logits)[0]
    assert probs.tolist() == pytest.approx(list(rates.values()), abs=0.15)
    trained = BertForSequenceClassification(config)
    with torch.no_grad():
        trained.classifier.bias.copy_(torch.tensor([0.3, -0.2, 1.0]))
    start_at_base_rates(ctx, trained)
    assert trained.classifier.bias.tolist() == pytest.approx([0.3, -0.2, 1.0])
