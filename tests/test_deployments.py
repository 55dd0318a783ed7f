"""A run answers with its fastest export that agrees with it (nlptasks/inference/deployments.py):
``nlptasks export RUN --onnx OUT`` measures OUT against the run's fp32 weights on validation rows
and records it in ``RUN/deployments.json``; loads of RUN with every choice ``auto`` (infer, eval,
serve, ``nlptasks.load``) answer with it only while it agrees, is faster on this CPU and is still
the folder that was measured; ``--backend torch`` and any other explicit choice is the run's own.

The measured speeds of a tiny model are noise, so the choice is tested by rewriting the recorded
figures (faster, slower, another CPU, disagreeing) and checking which model answers."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from conftest import CLS_TEXTS, ROOT, tiny_run  # noqa: E402
from nlptasks.inference.deployments import (  # noqa: E402
    DEPLOYMENTS,
    FLOAT_TOLERANCE,
    TOLERANCE_POINTS,
    agreement,
    read_deployments,
    record_deployment,
)


def _entry(run_dir: Path) -> dict:
    (entry,) = read_deployments(run_dir)
    return entry


def _rewrite(run_dir: Path, **changes) -> None:  # noqa: ANN003
    entry = {**_entry(run_dir), **changes}
    (run_dir / DEPLOYMENTS).write_text(json.dumps({"deployments": [entry]}), encoding="utf-8")


def _faster(run_dir: Path, batched: float = 2.0, single: float = 2.0) -> None:
    base = _entry(run_dir)["run_speed"]
    _rewrite(run_dir, speed={"batched": base["batched"] * batched, "single": base["single"] * single})


def _answers_with(run_dir: Path, **options) -> str:  # noqa: ANN003
    import nlptasks

    return type(nlptasks.load(run_dir, **options).model).__name__


@pytest.fixture(scope="module")
def run_and_export(runs, tmp_path_factory):
    from nlptasks.cli import main

    run_dir = tiny_run(runs, "cls.toml", "deploy", "data.max_train_rows=300")
    out = tmp_path_factory.mktemp("deploy") / "fp32"
    assert main(["export", str(run_dir), "--onnx", str(out), "--check-rows", "50"]) == 0
    return run_dir, out


def test_export_measures_on_validation_and_records_it(run_and_export, capsys):
    run_dir, out = run_and_export
    entry = _entry(run_dir)
    assert entry["folder"] == str(out.resolve()) and entry["backend"] == "onnx" and entry["label"] == "onnx none"
    assert entry["split"] == "validation" and entry["file"].endswith("validation.csv")  # never the test file
    assert entry["rows"] == entry["compared"]["inputs"] > 0
    assert entry["compared"]["changed"] == 0 and entry["agrees"] is True  # fp32: the same answers
    assert entry["speed"]["batched"] > 0 and entry["run_speed"]["single"] > 0 and entry["threads"] >= 1
    assert entry["folder_digest"] and entry["run_digest"]  # both folders are sealed
    manifest = json.loads((out / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["onnx"]["deployment"]["why"] == entry["why"]
    assert "Against the run's fp32 weights on" in (out / "README.md").read_text(encoding="utf-8")


def test_auto_answers_with_the_export_only_while_it_qualifies(run_and_export, cli, caplog):
    import logging

    import nlptasks

    run_dir, out = run_and_export
    _faster(run_dir)
    caplog.set_level(logging.INFO, logger="nlptasks")
    code, stdout, err = cli("infer", "--model", run_dir, *CLS_TEXTS)
    assert code == 0, err
    assert f"answering with {out.resolve()} (onnx none)" in caplog.text and "--backend torch" in caplog.text
    answers = [json.loads(line) for line in stdout.splitlines()]
    assert answers == nlptasks.load(out)(CLS_TEXTS)  # the export's own answers, as they are
    assert _answers_with(run_dir) == "OnnxModel"
    assert _answers_with(run_dir, device="cpu") == "OnnxModel"  # cpu is where it was measured
    for explicit in ({"backend": "torch"}, {"precision": "fp32"}):  # any explicit choice: the run's own
        assert _answers_with(run_dir, **explicit) != "OnnxModel"
    caplog.clear()
    code, stdout, _ = cli("infer", "--model", run_dir, "--backend", "torch", *CLS_TEXTS)
    assert "answering with" not in caplog.text
    assert [json.loads(line) for line in stdout.splitlines()] == nlptasks.load(run_dir, backend="torch")(CLS_TEXTS)

    cpu = _entry(run_dir)["cpu"]
    _faster(run_dir, batched=1.0)  # not faster batched
    assert _answers_with(run_dir) != "OnnxModel"
    _faster(run_dir, batched=2.0, single=0.9)  # slower one at a time
    assert _answers_with(run_dir) != "OnnxModel"
    _faster(run_dir)
    _rewrite(run_dir, cpu="Some Other CPU")  # speed is the machine's
    assert _answers_with(run_dir) != "OnnxModel"
    _rewrite(run_dir, cpu=cpu)
    assert _answers_with(run_dir) == "OnnxModel"  # each case below changes one thing of a chosen record
    _rewrite(run_dir, agrees=False)
    assert _answers_with(run_dir) != "OnnxModel"
    digest = _entry(run_dir)["folder_digest"]
    _rewrite(run_dir, agrees=True, folder_digest="0" * 64)  # not the folder that was measured
    assert _answers_with(run_dir) != "OnnxModel"
    _rewrite(run_dir, folder_digest=digest, run_digest="0" * 64)  # the run changed since
    assert _answers_with(run_dir) != "OnnxModel"
    (run_dir / DEPLOYMENTS).write_text("{not json", encoding="utf-8")  # a damaged record: not trusted
    assert _answers_with(run_dir) != "OnnxModel"


def test_eval_and_serve_follow_the_same_choice(runs, cli, tmp_path):
    from nlptasks.serve.models import load_models

    run_dir = tiny_run(runs, "cls.toml", "deploy-eval", "data.max_train_rows=300")
    out = tmp_path / "fp32"
    code, stdout, err = cli("export", run_dir, "--onnx", out, "--check-rows", "0")
    assert code == 0, err
    assert "against the run's fp32 weights on" in stdout
    _faster(run_dir)
    data = ROOT / "recipes" / "data" / "cls" / "test.csv"
    code, _, err = cli("eval", run_dir, "--data", data, "--output", tmp_path / "ev")
    assert code == 0, err
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["run"] == str(out.resolve())
    code, _, err = cli("eval", run_dir, "--data", data, "--output", tmp_path / "ev-torch", "--backend", "torch")
    assert code == 0, err
    assert json.loads((tmp_path / "ev-torch" / "metrics.json").read_text())["run"] == str(run_dir)
    assert type(load_models([run_dir])[run_dir.name].predictor.model).__name__ == "OnnxModel"

    # the export damaged after it was measured: named in a warning, the run's own weights answer
    sums = {line.split()[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    assert "model.onnx" in sums
    with (out / "model.onnx").open("ab") as fh:
        fh.write(b"\0")
    assert _answers_with(run_dir) != "OnnxModel"
    shutil.rmtree(out)  # gone: the run's own weights
    assert _answers_with(run_dir) != "OnnxModel"


def _record_many(run_dir: str, worker: int) -> None:
    for i in range(25):
        record_deployment(Path(run_dir), {"folder": f"/exports/{worker}-{i}", "agrees": False})


def test_concurrent_exports_keep_every_entry(tmp_path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.starmap(_record_many, [(str(tmp_path), w) for w in range(4)])
    folders = {e["folder"] for e in read_deployments(tmp_path)}
    assert folders == {f"/exports/{w}-{i}" for w in range(4) for i in range(25)}
    record_deployment(tmp_path, {"folder": "/exports/0-0", "agrees": True})  # the same folder: replaced
    entries = read_deployments(tmp_path)
    assert len(entries) == 100 and [e["agrees"] for e in entries if e["folder"] == "/exports/0-0"] == [True]


def _gold(torch: float, onnx: float) -> dict:
    return {"torch": torch, "onnx": onnx, "change_points": round(100 * (onnx - torch), 4), "items": 1000}


@pytest.mark.parametrize(
    ("measured", "agrees"),
    [
        ({"inputs": 1000, "changed": 30, "max_score_diff": 0.2, "gold": {"label": _gold(0.800, 0.798)}}, True),
        ({"inputs": 1000, "changed": 30, "max_score_diff": 0.2, "gold": {"label": _gold(0.800, 0.796)}}, False),
        ({"inputs": 1000, "changed": 90, "max_score_diff": 0.3, "gold": {"label": _gold(0.800, 0.850)}}, True),
        (  # every scored field must hold: ner's tags and a second field
            {"inputs": 10, "changed": 2, "max_score_diff": 0.1, "gold": {"a": _gold(0.9, 0.9), "b": _gold(0.9, 0.8)}},
            False,
        ),
        ({"inputs": 10, "changed": 0, "max_score_diff": FLOAT_TOLERANCE / 2, "gold": {}}, True),
        ({"inputs": 10, "changed": 0, "max_score_diff": FLOAT_TOLERANCE * 2, "gold": {}}, False),
        ({"inputs": 10, "changed": 1, "max_score_diff": 0.0, "gold": {}}, False),
        ({"inputs": 0, "changed": 0, "max_score_diff": 0.0, "gold": {}}, False),
    ],
)
def test_the_agreement_rule(measured, agrees):
    verdict, why = agreement(measured)
    assert verdict is agrees and why
    if measured["gold"] and not agrees:
        assert str(TOLERANCE_POINTS) in why


def test_an_export_whose_answers_depend_on_the_batch_never_answers_for_the_run(runs, cli, tmp_path):
    """`--quantize int8-dynamic` is opt-in: measured and recorded, but never chosen by auto, however
    fast and close it is."""
    run_dir = tiny_run(runs, "cls.toml", "deploy-dynamic", "data.max_train_rows=300")
    out = tmp_path / "dynamic"
    code, stdout, err = cli("export", run_dir, "--onnx", out, "--quantize", "int8-dynamic", "--check-rows", "0")
    assert code == 0, err
    entry = _entry(run_dir)
    assert entry["agrees"] is False and "depend on the rows batched with it" in entry["why"]
    assert "keep its own weights" in stdout
    _faster(run_dir)
    assert _answers_with(run_dir) != "OnnxModel"
