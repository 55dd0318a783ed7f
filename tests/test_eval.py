"""``nlptasks eval``: a trained run scored on labelled data through the task's own steps.

The run's own test file must give back exactly the test metrics ``nlptasks run`` printed (every
task, every mode); rows the run cannot score are counted, not fatal; the errors file lists the
wrong predictions with their file rows, and agrees with the metrics.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import RECIPES, read_metrics, tiny_run

TIMINGS = {"runtime", "samples_per_second", "steps_per_second", "epoch"}
DATA = RECIPES / "data"
CASES = {
    "cls": ("cls.toml", DATA / "cls" / "test.csv", ()),
    "ner": ("ner.toml", DATA / "ner" / "test.jsonl", ()),
    "pair-cross": ("pair.toml", DATA / "pair" / "test.csv", ()),
    "pair-bi": ("pair.toml", DATA / "pair" / "test.csv", ("options.mode=bi",)),
    "mlm": ("mlm.toml", DATA / "cls" / "test.csv", ()),
    "sft": (
        "sft.toml",
        DATA / "sft" / "test.jsonl",
        ("options.generation_eval={rows=6, max_new_tokens=8}", "data.max_eval_rows=24"),
    ),
}
FAST = ("train.max_steps=8", "train.eval_strategy=no", "train.keep_best=false")


def _eval(cli, run: Path, *args: str) -> tuple[dict, Path]:
    """``nlptasks eval RUN`` with the run's own torch weights, scored as the run scored them
    (``--backend torch``: with every choice ``auto``, a run whose end-of-run measurement found bf16
    faster on this machine is scored in bf16, tests/test_deployments.py)."""
    out = run.parent / "eval-out"
    code, stdout, err = cli("eval", run, "--output", out, "--backend", "torch", *args)
    assert code == 0, err
    assert "eval saved to" in stdout and " rows/s, the model's load included)" in stdout
    return json.loads((out / "metrics.json").read_text(encoding="utf-8")), out


def _errors(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("case", list(CASES))
def test_the_runs_test_file_gives_back_its_test_metrics(case, cli, tmp_path):
    recipe, test_file, sets = CASES[case]
    run = tiny_run(tmp_path / "runs", recipe, "t", *FAST, *sets, epochs=None)
    expected = {k: v for k, v in read_metrics(run)["test"].items() if k not in TIMINGS}
    args = ["--data", str(test_file)] + (["--set", "data.max_eval_rows=24"] if case == "sft" else [])
    got, out = _eval(cli, run, *args)
    scored = {k: v for k, v in got["test"].items() if k not in TIMINGS}
    assert set(scored) == set(expected), (scored, expected)
    for key, value in expected.items():
        assert scored[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert got["rows_per_second"] > 0 and abs(got["rows"] / got["rows_per_second"] - got["seconds"]) <= 0.06
    # both say how their figures were computed, and they were computed alike: what makes them equal
    ran = read_metrics(run)["computed"]
    assert set(ran) == {"threads", "precision", "backend", "device", "processes"} and ran["threads"] >= 1
    assert got["computed"] == ran
    if got["errors"] is None:  # a task that lists no wrong predictions (mlm)
        assert not (out / "errors.jsonl").exists()
        return
    errors = _errors(out)
    assert got["errors"] == len(errors)
    assert all(isinstance(e["row"], int) and e["row"] >= 1 for e in errors)
    if case in ("cls", "pair-cross"):  # one wrong line per wrong example
        assert len(errors) == round((1 - expected["accuracy"]) * got["examples"])
        assert all(e["gold"] != e["predicted"] for e in errors)
    assert (out / "report.md").read_text(encoding="utf-8").startswith("# Evaluation of t")


def test_cls_errors_name_the_file_row_of_each_wrong_text(cli, tmp_path):
    run = tiny_run(tmp_path / "runs", "cls.toml", "t", *FAST, epochs=None)
    got, out = _eval(cli, run, "--data", str(DATA / "cls" / "test.csv"))
    with (DATA / "cls" / "test.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for error in _errors(out):
        source = rows[error["row"] - 1]  # row 1 = the first data row
        assert source["text"] == error["text"] and source["label"] == error["gold"]
    assert (out / "confusion_matrix.png").stat().st_size > 1000


def test_rows_the_run_cannot_score_are_counted_and_the_rest_scored(cli, tmp_path):
    run = tiny_run(tmp_path / "runs", "cls.toml", "t", *FAST, epochs=None)
    clean, _ = _eval(cli, run, "--data", str(DATA / "cls" / "test.csv"))
    text = (DATA / "cls" / "test.csv").read_text(encoding="utf-8")
    dirty = tmp_path / "dirty.csv"
    dirty.write_text(text.rstrip("\n") + "\n房间一般般,中性\n,正面\n还行吧,\n", encoding="utf-8")
    code, out, err = cli("eval", run, "--data", dirty, "--output", tmp_path / "dirty-eval")
    assert code == 0, err
    got = json.loads((tmp_path / "dirty-eval" / "metrics.json").read_text(encoding="utf-8"))
    assert got["rows"] == clean["rows"] + 3 and got["examples"] == clean["examples"]
    assert got["dropped"] == {"label unknown to the run": 1, "empty text": 1, "empty label": 1}
    assert got["test"]["accuracy"] == clean["test"]["accuracy"]
    assert "label unknown to the run" in out


def test_a_column_named_otherwise_is_read_with_set(cli, tmp_path):
    run = tiny_run(tmp_path / "runs", "cls.toml", "t", *FAST, epochs=None)
    clean, _ = _eval(cli, run, "--data", str(DATA / "cls" / "test.csv"))
    renamed = tmp_path / "renamed.csv"
    text = (DATA / "cls" / "test.csv").read_text(encoding="utf-8")
    renamed.write_text(text.replace("text,label", "review,label", 1), encoding="utf-8")
    code, _, err = cli("eval", run, "--data", renamed, "--output", tmp_path / "e1")
    assert code != 0 and "review" in err and "options.text_column" in err, err
    code, _, err = cli(
        "eval", run, "--data", renamed, "--output", tmp_path / "e2", "--set", "options.text_column=review"
    )
    assert code == 0, err
    got = json.loads((tmp_path / "e2" / "metrics.json").read_text(encoding="utf-8"))
    assert got["test"]["accuracy"] == clean["test"]["accuracy"]


def test_what_would_change_the_model_is_refused(cli, tmp_path):
    run = tiny_run(tmp_path / "runs", "cls.toml", "t", *FAST, epochs=None)
    code, _, err = cli("eval", run, "--data", DATA / "cls" / "test.csv", "--set", "model.max_length=16")
    assert code != 0 and "--set model.max_length" in err and "options.*" in err, err
    code, _, err = cli("eval", run, "--data", tmp_path / "missing.csv")
    assert code != 0 and "missing.csv" in err and "Traceback" not in err, err
    code, _, err = cli("eval", tmp_path, "--data", DATA / "cls" / "test.csv")
    assert code != 0 and "not a complete nlptasks run" in err, err
    (tmp_path / "a-folder").mkdir()
    code, _, err = cli("eval", run, "--data", tmp_path / "a-folder")  # blamed on --data, not a recipe key
    assert code == 2 and f"--data {tmp_path / 'a-folder'}: is a folder" in err and "data.train" not in err, err


def test_several_files_get_a_folder_each(cli, tmp_path):
    run = tiny_run(tmp_path / "runs", "cls.toml", "t", *FAST, epochs=None)
    code, out, err = cli("eval", run, "--data", DATA / "cls" / "test.csv", "--data", DATA / "cls" / "validation.csv")
    assert code == 0, err
    folders = sorted((run / "eval").glob("*/*/metrics.json"))
    assert [f.parent.name for f in folders] == ["test", "validation"]
    validation = json.loads(folders[1].read_text(encoding="utf-8"))
    assert validation["test"]["accuracy"] == pytest.approx(read_metrics(run)["validation"]["accuracy"], abs=1e-9)
    code, table, err = cli("compare", run)  # eval results beside the run's own
    assert code == 0, err
    row = next(line for line in table.splitlines() if line.startswith("| eval `validation.csv` accuracy |"))
    assert f"{read_metrics(run)['validation']['accuracy']:.4f}" in row


def test_an_adapter_run_is_scored_with_its_adapter(cli, tmp_path):
    run = tiny_run(
        tmp_path / "runs",
        "cls.toml",
        "t",
        *FAST,
        "peft.method=lora",
        "peft.r=4",
        "train.learning_rate=0.01",
        epochs=None,
    )
    expected = read_metrics(run)["test"]
    got, _ = _eval(cli, run, "--data", str(DATA / "cls" / "test.csv"))
    assert got["test"]["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-9)
    assert got["test"]["loss"] == pytest.approx(expected["loss"], rel=1e-5)
    base, _ = _eval(cli, run, "--data", str(DATA / "cls" / "test.csv"), "--base-only")
    assert base["test"]["loss"] != pytest.approx(expected["loss"], rel=1e-3)  # the adapter made a difference


def test_compare_flags_an_eval_computed_with_other_threads_than_the_run(cli, tmp_path):
    """A figure moves with the threads that compute it (the sums of a matrix product are ordered by
    them): an eval computed with other threads than its run is flagged beside the run's figures, and
    the card says how the run's were computed."""
    import torch

    run = tiny_run(tmp_path / "runs", "cls.toml", "t", *FAST, epochs=None)
    ran = read_metrics(run)["computed"]
    other = 1 if ran["threads"] != 1 else 2
    threads = torch.get_num_threads()
    torch.set_num_threads(other)
    try:  # into the run's own eval/ folder (the default), where compare finds it
        code, _, err = cli("eval", run, "--backend", "torch", "--data", str(DATA / "cls" / "test.csv"))
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err
    (record,) = run.glob("eval/**/metrics.json")
    assert json.loads(record.read_text(encoding="utf-8"))["computed"]["threads"] == other
    code, out, err = cli("compare", run)
    assert code == 0, err
    assert "| figures computed with | " in out and f"{ran['threads']} thread" in out
    assert "**Figures computed differently**" in out
    assert f"- eval `test.csv` of `t`: threads {ran['threads']} vs {other}" in out, out
    card = (run / "README.md").read_text(encoding="utf-8")
    assert f"| figures computed with | {ran['threads']} thread" in card
