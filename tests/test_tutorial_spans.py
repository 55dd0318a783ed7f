"""The fourth tutorial plugin (docs/plugin-tutorial/nlptasks-spans): nested entity spans with a
GlobalPointer head **of the plugin's own** (``SpanModel``, a ``PreTrainedModel`` subclass around
the encoder ``load_model(ctx, "AutoModel")`` gives), outputs of rank 4 ``(batch, types, tokens,
tokens)`` whose last two axes follow each batch's padded length, and labels of kind ``span``.

What every command does with such a plugin, end to end: run under the default dynamic padding
(the evaluation gathers batches of different lengths), the class recorded in the manifest, eval
(the run's own test metrics), infer (batched = one at a time), serve, inspect-batch (the spans),
LoRA (the plugin's head trained and saved in full), the refused PEFT methods, tune; and, **in fresh
processes** where the plugin is installed only as an entry point (as ``pip install`` leaves it):
export --onnx (predictions and eval, loss included, as the run's), export --merge, nlptasks.load,
and the card's plain-transformers snippet.  What the head learns (nested spans) is the slow tier's.

Loaded in-process with ``nlptasks.testing.plugin_host`` (no installation) for the in-process tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PACKAGE = ROOT / "docs" / "plugin-tutorial" / "nlptasks-spans"
RECIPE = PACKAGE / "recipe.toml"
DATA = PACKAGE / "data"
sys.path.insert(0, str(PACKAGE / "src"))

import nlptasks_spans  # noqa: E402
from nlptasks_spans import SpanOptions, bio_spans, entity_spans, row_entities, token_span  # noqa: E402

from nlptasks.testing import plugin_host, run_cli, run_recipe, using_host  # noqa: E402

FAST = ("data.max_train_rows=240", "data.max_eval_rows=60", "train.epochs=2")
EVAL_ROWS = ("--set", "data.max_eval_rows=60")  # eval reads the file as the FAST run's test split was read
TINY = ("data.max_train_rows=32", "data.max_eval_rows=8", "train.max_steps=2", "train.eval_strategy=no")
TIMINGS = {"runtime", "samples_per_second", "steps_per_second", "epoch"}
TEXTS = ["王伟昨天在杭州西湖大酒店见到了李娜。", "听说青岛银行要在成都开一家新店。", "我们在崂山住了三天。"]


def sets(*overrides: str) -> list[str]:
    return [part for o in overrides for part in ("--set", o)]


def rows(split: str, n: int) -> list[dict]:
    lines = (DATA / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def host():
    return plugin_host(nlptasks_spans)


@pytest.fixture(scope="module")
def fast_run(host, tmp_path_factory):
    return run_recipe(RECIPE, *FAST, host=host, folder=tmp_path_factory.mktemp("spans"), name="fast")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """An environment for fresh processes where the plugin is installed as pip leaves it: its
    source on the path and an entry point in the ``nlptasks`` group (a dist-info folder), nothing
    imported beforehand."""
    site = tmp_path_factory.mktemp("site")
    info = site / "nlptasks_spans-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nlptasks-spans\nVersion: 0.1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[nlptasks]\nspans = nlptasks_spans\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(PACKAGE / "src")])}
    env.pop("NLPTASKS_PLUGINS", None)
    return env


def fresh(env: dict, *argv: str, code: str | None = None) -> subprocess.CompletedProcess:
    """``python -m nlptasks ARGV`` (or ``python -c CODE``) in a new process, checked."""
    command = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "nlptasks", *argv]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done


# --- step 4: entities from spans or BIO tags, as token spans ----------------------------------------


def test_bio_rows_become_character_spans():
    text, spans = bio_spans(list("王伟在杭州"), ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"])
    assert text == "王伟在杭州" and spans == [(0, 2, "PER"), (3, 5, "LOC")]
    text, spans = bio_spans(["John", "lives", "in", "New", "York"], ["B-PER", "O", "O", "B-LOC", "I-LOC"])
    assert text == "John lives in New York" and spans == [(0, 4, "PER"), (14, 22, "LOC")]
    # an I- after another type opens a new entity (no silent merge); B- right after B- is two entities
    assert bio_spans(list("abc"), ["B-PER", "I-LOC", "B-LOC"])[1] == [(0, 1, "PER"), (1, 2, "LOC"), (2, 3, "LOC")]


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"text": "abc", "entities": [{"start": 2, "end": 5, "label": "X"}]}, "outside the text's 3 characters"),
        ({"text": "abc", "entities": [[1, 1, "X"]]}, "outside the text"),
        ({"text": "abc", "entities": "X"}, "entities are not a list"),
        ({"text": "abc", "entities": [{"start": "0", "end": 1, "label": "X"}]}, "must be integers"),
        ({"text": " ", "entities": []}, "empty text"),
    ],
)
def test_row_problems(row, says):
    assert says in row_entities(row, SpanOptions(), "spans")


def test_nested_spans_are_kept_and_token_spans_need_boundaries():
    found = entity_spans([{"start": 0, "end": 6, "label": "ORG"}, [0, 2, "LOC"]])
    assert found == [(0, 6, "ORG"), (0, 2, "LOC")]
    offsets = [(0, 0), (0, 1), (1, 2), (2, 4), (0, 0)]  # [CLS] a b cd [SEP]
    assert token_span(offsets, 0, 2) == (1, 2) and token_span(offsets, 2, 4) == (3, 3)
    assert token_span(offsets, 3, 4) is None  # starts inside a token


def test_a_bad_row_is_an_error_naming_the_file_and_row(host, tmp_path):
    bad = tmp_path / "train.jsonl"
    lines = (DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()[:20]
    lines[6] = json.dumps({"text": "杭州", "entities": [{"start": 0, "end": 9, "label": "LOC"}]}, ensure_ascii=False)
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run_cli(
        "run", RECIPE, "--no-progress", *sets(*TINY, f"data.train={bad}", f"output.dir={tmp_path}"), host=host
    )
    assert code == 2 and f"{bad}:7: entity LOC [0, 9) is outside the text's 2 characters" in err


# --- run: the plugin's class recorded; evaluation of rank-4 outputs under dynamic padding -----------


def test_the_run_records_the_plugins_own_class(fast_run):
    manifest = json.loads((fast_run.output_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["model_class"] == "SpanModel" and manifest["model_module"] == "nlptasks_spans.model"
    config = json.loads((fast_run.output_dir / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "nlptasks-spans" and config["architectures"] == ["SpanModel"]
    card = (fast_run.output_dir / "README.md").read_text(encoding="utf-8")
    assert "from nlptasks_spans.model import SpanModel" in card and "SpanModel.from_pretrained(" in card


def test_evaluation_gathers_batches_of_different_lengths(fast_run):
    """The test split's batches pad to different lengths (dynamic padding): the run's span F1 is
    what the predictor's spans give on the same texts, so no batch was cut or misplaced."""
    test = rows("test", 60)
    assert len({len(r["text"]) for r in test}) > 5  # batches of different lengths
    predicted = fast_run.predict([r["text"] for r in test])
    hits = found = gold = 0
    for row, answer in zip(test, predicted, strict=True):
        mine = {(e["start"], e["end"], e["label"]) for e in answer["entities"]}
        theirs = {(e["start"], e["end"], e["label"]) for e in row["entities"]}
        hits, found, gold = hits + len(mine & theirs), found + len(mine), gold + len(theirs)
    metrics = fast_run.metrics["test"]
    assert metrics["precision"] == pytest.approx(hits / found, abs=1e-6)
    assert metrics["recall"] == pytest.approx(hits / gold, abs=1e-6)
    assert metrics["f1"] > 0.3 and set(metrics) >= {"f1/LOC", "f1/ORG", "f1/PER", "loss"}


def test_eval_of_the_test_file_equals_the_runs_test_metrics(fast_run, host, tmp_path):
    out = tmp_path / "eval"
    code, _, err = run_cli(
        "eval", fast_run.output_dir, "--data", DATA / "test.jsonl", "--output", out, *EVAL_ROWS, "--backend", "torch",
        host=host,
    )  # fmt: skip
    assert code == 0, err
    got = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    expected = {k: v for k, v in fast_run.metrics["test"].items() if k not in TIMINGS}
    scored = {k: v for k, v in got["test"].items() if k not in TIMINGS}
    assert set(scored) == set(expected)
    for key, value in expected.items():
        assert scored[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert errors and len(errors) == got["errors"]
    first = rows("test", 60)[errors[0]["row"] - 1]
    assert errors[0]["text"] == first["text"] and errors[0]["gold"] != errors[0]["predicted"]
    assert len(errors[0]["gold"]) == len(first["entities"])


# --- infer and serve -----------------------------------------------------------------------------------


def test_a_batch_answers_as_one_input_at_a_time(fast_run, host):
    import nlptasks

    texts = [r["text"] for r in rows("validation", 40)]
    with using_host(host):
        predictor = nlptasks.load(fast_run.output_dir, backend="torch", precision="fp32")
    predictor.batch_size = 16
    batched = predictor(texts)
    alone = [predictor([text])[0] for text in texts]
    for b, a in zip(batched, alone, strict=True):
        assert [(e["start"], e["end"], e["label"]) for e in b["entities"]] == [
            (e["start"], e["end"], e["label"]) for e in a["entities"]
        ]
        assert [e["score"] for e in b["entities"]] == pytest.approx([e["score"] for e in a["entities"]], abs=1e-4)
    assert sum(len(b["entities"]) for b in batched) > 0


def test_infer_and_serve_answer_alike(fast_run, host):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    import nlptasks
    from nlptasks.serve.app import create_app
    from nlptasks.serve.models import load_models
    from nlptasks.serve.state import ServerState, ServeSettings

    code, out, err = run_cli("infer", "--model", fast_run.output_dir, *TEXTS, host=host)
    assert code == 0, err
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["text"] for a in answers] == TEXTS
    for answer in answers:
        for e in answer["entities"]:
            assert answer["text"][e["start"] : e["end"]] == e["text"] and 0 < e["score"] < 1
    with using_host(host):
        state = ServerState(load_models([fast_run.output_dir], ["spans"]), ServeSettings())
        expected = nlptasks.load(fast_run.output_dir)(TEXTS)
        try:
            with TestClient(create_app(state)) as client:
                served = client.post("/v1/predict/spans", json={"inputs": TEXTS})
        finally:
            state.close()
    assert served.status_code == 200, served.text
    assert served.json()["outputs"] == expected


# --- inspect-batch: span labels -------------------------------------------------------------------------


def test_inspect_batch_shows_the_spans(host):
    code, out, err = run_cli(
        "inspect-batch", RECIPE, "--rows", "3", *sets("data.max_train_rows=8", "data.max_eval_rows=8"), host=host
    )
    assert code == 0, err
    assert "labels: labels (span)" in out
    first = rows("train", 1)[0]  # 听说青岛大酒店要在南京开一家新店。: ORG 青岛大酒店 with LOC 青岛 inside, LOC 南京
    assert f"{len(first['entities'])} spans in labels" in out
    assert "span 'ORG': tokens 3..7 '青岛大酒店'" in out and "span 'LOC': tokens 3..4 '青岛'" in out
    assert "ORG,LOC" in out  # a token inside both spans shows both classes
    assert "ok: every example of train, validation, test has labels for the loss" in out


# --- PEFT: lora trains the plugin's head in full; position-shifting methods are refused ----------------


def test_lora_trains_and_saves_the_plugins_head(host, tmp_path, installed):
    lora = (*TINY, "peft.method=lora", f"output.dir={tmp_path}", "output.run_name=lora")
    code, _, err = run_cli("validate", RECIPE, *sets(*lora), host=host)
    assert code == 0, err
    code, out, err = run_cli("run", RECIPE, "--no-progress", *sets(*lora), host=host)
    assert code == 0, err
    assert "its head (head) trains in full and is saved with the adapter" in err
    run_dir = tmp_path / "spans" / "lora"
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["peft"]["task_type"] == "FEATURE_EXTRACTION" and manifest["model_class"] == "SpanModel"
    from safetensors import safe_open

    with safe_open(str(run_dir / "adapter_model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    assert any(".head." in n or n.startswith("head.") for n in names), names[:10]
    # a fresh process merges it (the plugin's class, found from the manifest) and checks the merge
    merged = tmp_path / "merged"
    fresh(installed, "export", str(run_dir), "--merge", str(merged))
    assert json.loads((merged / "nlptasks.json").read_text(encoding="utf-8"))["merged_from"]["check"]["equal"]
    done = fresh(installed, "infer", "--model", str(merged), *TEXTS)
    code, ours, err = run_cli("infer", "--model", run_dir, *TEXTS, host=host)
    assert code == 0, err
    spans = [[(e["start"], e["end"], e["label"]) for e in json.loads(line)["entities"]] for line in ours.splitlines()]
    assert [
        [(e["start"], e["end"], e["label"]) for e in json.loads(line)["entities"]] for line in done.stdout.splitlines()
    ] == spans


@pytest.mark.parametrize("method", ["prompt", "p_tuning", "prefix"])
def test_position_shifting_methods_are_refused_at_validate(method, host):
    code, _, err = run_cli("validate", RECIPE, *sets(f"peft.method={method}"), host=host)
    assert code == 2 and f"peft.method: '{method}' does not work for task 'spans' (FEATURE_EXTRACTION)" in err
    assert ("label kind span" in err) if method != "prefix" else ("past_key_values" in err)


# --- fresh processes: export --onnx, eval of the export (loss included), nlptasks.load, the card -------


@pytest.fixture(scope="module")
def exported(fast_run, installed, tmp_path_factory):
    """The fast run exported to ONNX by a fresh process."""
    pytest.importorskip("onnxruntime")
    out = tmp_path_factory.mktemp("export") / "onnx"
    fresh(installed, "export", str(fast_run.output_dir), "--onnx", str(out))
    return out


def test_a_fresh_process_exports_loads_and_scores_the_plugins_class(fast_run, installed, exported, tmp_path):
    out = exported
    manifest = json.loads((out / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["onnx"]["model_class"] == "SpanModel" and manifest["model_module"] == "nlptasks_spans.model"
    compare = f"""
import json, nlptasks
texts = {TEXTS!r}
torch = nlptasks.load({str(fast_run.output_dir)!r}, backend="torch", precision="fp32")(texts)
onnx = nlptasks.load({str(out)!r})(texts)
assert type(nlptasks.load({str(out)!r}).model).__name__ == "OnnxModel"
print(json.dumps([torch, onnx]))
"""
    torch_answers, onnx_answers = json.loads(fresh(installed, code=compare).stdout)
    for a, b in zip(torch_answers, onnx_answers, strict=True):
        assert [(e["start"], e["end"], e["label"]) for e in a["entities"]] == [
            (e["start"], e["end"], e["label"]) for e in b["entities"]
        ]
    scored = []
    for folder, pin in ((fast_run.output_dir, ["--backend", "torch", "--set", "train.precision=fp32"]), (out, [])):
        target = tmp_path / f"eval-{folder.name}"
        fresh(
            installed,
            "eval",
            str(folder),
            "--data",
            str(DATA / "test.jsonl"),
            "--output",
            str(target),
            *EVAL_ROWS,
            *pin,
        )
        scored.append(json.loads((target / "metrics.json").read_text(encoding="utf-8"))["test"])
    assert scored[1]["f1"] == scored[0]["f1"]
    assert scored[1]["loss"] == pytest.approx(scored[0]["loss"], abs=1e-4)  # SpanModel.loss_from_outputs


def test_eval_of_an_export_without_a_loss_says_why(exported, host, tmp_path, monkeypatch):
    from nlptasks_spans.model import SpanModel

    monkeypatch.delattr(SpanModel, "loss_from_outputs")  # a plugin class that gives no loss for its graph
    out = tmp_path / "eval"
    code, _, err = run_cli("eval", exported, "--data", DATA / "test.jsonl", "--output", out, *EVAL_ROWS, host=host)
    assert code == 0, err
    got = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert got["test"]["loss"] is None and got["test"]["f1"] > 0
    assert "loss_from_outputs(outputs, labels)" in got["loss_not_computed"]
    assert "- loss: not computed: the exported graph has no loss" in (out / "report.md").read_text(encoding="utf-8")


def test_the_cards_snippet_loads_the_model_in_a_fresh_process(fast_run, installed):
    card = (fast_run.output_dir / "README.md").read_text(encoding="utf-8")
    snippet = card.split("With plain transformers and the plugin's model class")[1].split("```python")[1]
    snippet = snippet.split("```")[0].replace("RUN_DIR", str(fast_run.output_dir))
    code = (
        snippet
        + f"\nbatch = tokenizer({TEXTS[0]!r}, return_tensors='pt')\n"
        + "print(type(model).__name__, tuple(model(**batch).logits.shape))\n"
    )
    done = fresh(installed, code=code)
    assert done.stdout.split()[0] == "SpanModel"
    assert done.stdout.strip().endswith(f"(1, 3, {len(TEXTS[0]) + 2}, {len(TEXTS[0]) + 2})")


def test_a_module_outside_the_plugins_is_not_imported(fast_run, tmp_path):
    from nlptasks.engine.model.classes import resolve
    from nlptasks.errors import NlptasksError

    with pytest.raises(NlptasksError, match="not part of an installed nlptasks plugin"):
        resolve({"model_class": "Thing", "model_module": "surely_not_installed_pkg.model"})
    with pytest.raises(NlptasksError, match="not in nlptasks_spans.model any more"):
        resolve({"model_class": "Renamed", "model_module": "nlptasks_spans.model"})


# --- tune: two trials, each a normal run ------------------------------------------------------------


def test_tune_runs_two_trials(host, tmp_path):
    pytest.importorskip("optuna")
    text = RECIPE.read_text(encoding="utf-8").replace('"data/', f'"{DATA}/')
    study = tmp_path / "study.toml"
    study.write_text(
        text + '\n[tune]\ntrials = 2\nseed = 42\n\n[tune.space]\n"options.head_size" = { choices = [16, 32] }\n',
        encoding="utf-8",
    )
    code, out, err = run_cli(
        "tune",
        study,
        *sets(*TINY[:3], "train.eval_strategy=steps", "train.eval_steps=2", f"output.dir={tmp_path / 'runs'}"),
        host=host,
    )
    assert code == 0, err
    folder = tmp_path / "runs" / "spans" / "tune-study"
    assert sorted(p.name for p in (folder / "trials").iterdir()) == ["trial-0", "trial-1"]
    assert "| trial | params | f1 | state | seconds | note |" in out


# --- slow: the recipe as shipped learns nested spans --------------------------------------------------


@pytest.mark.slow
def test_the_recipe_learns_nested_spans(host, tmp_path):
    run = run_recipe(RECIPE, host=host, folder=tmp_path, name="full")
    # Measured 2026-12-04 (seed 42, 2 cores): see docs/plugin-tutorial/nlptasks-spans/README.md
    assert run.metrics["test"]["f1"] > 0.9, run.metrics["test"]
    (answer,) = run.predict([TEXTS[0]])
    found = {(e["text"], e["label"]) for e in answer["entities"]}
    assert {("杭州西湖大酒店", "ORG"), ("杭州", "LOC"), ("西湖", "LOC")} <= found, found
