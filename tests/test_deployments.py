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
from nlptasks.engine.system.machine import cpu_has_bf16  # noqa: E402
from nlptasks.inference.deployments import (  # noqa: E402
    DEPLOYMENTS,
    FLOAT_TOLERANCE,
    TOLERANCE_POINTS,
    agreement,
    read_deployments,
    record_deployment,
)


def _entry(run_dir: Path) -> dict:
    """The run's one ONNX entry (on a CPU with native bf16 the run also recorded its bf16 one)."""
    (entry,) = [e for e in read_deployments(run_dir) if e.get("backend") == "onnx"]
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


def _gold(torch: float, onnx: float, changed: int = 0, items: int = 1000) -> dict:
    return {
        "torch": torch,
        "onnx": onnx,
        "change_points": round(100 * (onnx - torch), 4),
        "items": items,
        "changed": changed,
    }


@pytest.mark.parametrize(
    ("measured", "agrees"),
    [
        # the observed drop plus 1.645 sqrt(changed)/items must stay within 0.3 points
        ({"inputs": 1000, "changed": 0, "max_score_diff": 0.01, "gold": {"label": _gold(0.800, 0.800)}}, True),
        ({"inputs": 1000, "changed": 2, "max_score_diff": 0.2, "gold": {"label": _gold(0.800, 0.800, 2)}}, True),
        ({"inputs": 1000, "changed": 4, "max_score_diff": 0.2, "gold": {"label": _gold(0.800, 0.800, 4)}}, False),
        ({"inputs": 1000, "changed": 2, "max_score_diff": 0.2, "gold": {"label": _gold(0.800, 0.798, 2)}}, False),
        # int8 on SST-2 MiniLM (2026-11-27): 28 of 512 changed, measured -0.2 points, -1.3 on the test file
        (
            {"inputs": 512, "changed": 28, "max_score_diff": 0.3, "gold": {"label": _gold(0.7891, 0.7871, 28, 512)}},
            False,
        ),
        # many changed, but so many items that the net change is known: +5 points is no drop
        ({"inputs": 10**5, "changed": 90, "max_score_diff": 0.3, "gold": {"label": _gold(0.8, 0.85, 90, 10**5)}}, True),
        (  # every scored field must hold: ner's tags and a second field
            {"inputs": 10, "changed": 0, "max_score_diff": 0.1, "gold": {"a": _gold(0.9, 0.9), "b": _gold(0.9, 0.8)}},
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
    assert "this export does not answer for" in stdout
    assert "answer on this machine with the run's own weights (torch" in stdout
    _faster(run_dir)
    assert _answers_with(run_dir) != "OnnxModel"


def test_what_export_says_comes_next_is_what_the_next_load_does(runs, cli, tmp_path):
    """export's "answer ... with" line names the folder, backend and precision the next plain load
    uses, and its try: line is a command that runs, with an input from the run's own data (it was
    "..."); after the measurements change (the export made faster), the same rule answers for both."""
    import shlex

    import nlptasks
    from nlptasks.pipeline.onnx import what_loads_use

    run_dir = tiny_run(runs, "cls.toml", "deploy-says", "data.max_train_rows=300")
    out = tmp_path / "export"
    code, stdout, err = cli("export", run_dir, "--onnx", out, "--check-rows", "0")
    assert code == 0, err

    def check(said: str | None) -> None:
        folder, backend, precision = what_loads_use(run_dir)
        what = "this export" if folder.resolve() == out.resolve() else "the run's own weights"
        if said is not None:
            assert f"answer on this machine with {what} ({backend} {precision})" in said, said
        model = nlptasks.load(run_dir).model
        assert (type(model).__name__ == "OnnxModel") == (backend == "onnx") == (what == "this export")
        if backend == "torch":
            assert str(next(model.parameters()).dtype) == {"fp32": "torch.float32", "bf16": "torch.bfloat16"}[precision]

    check(stdout)
    _rewrite(run_dir, agrees=True, why="agrees")
    _faster(run_dir)
    check(None)
    assert what_loads_use(run_dir)[0].resolve() == out.resolve()
    try_line = next(x for x in stdout.splitlines() if x.startswith("try: "))
    argv = shlex.split(try_line.removeprefix("try: nlptasks "))
    assert '"..."' not in try_line and argv[:3] == ["infer", "--model", str(out)], try_line
    code, answered, err = cli(*argv)
    assert code == 0 and '"label"' in answered, err


def _precision_entry(run_dir: Path, **changes) -> dict:  # noqa: ANN003
    """A torch bf16 entry as ``nlptasks run`` records it on a CPU with native bf16, measured here."""
    from nlptasks.engine.system.machine import cpu_name
    from nlptasks.inference.deployments import folder_digest

    digest = folder_digest(run_dir)
    entry = {
        "folder": str(run_dir.resolve()),
        "backend": "torch",
        "precision": "bf16",
        "label": "torch bf16",
        "split": "validation",
        "file": "validation.csv",
        "rows": 128,
        "agrees": True,
        "why": "label 0.8 → 0.8",
        "speed": {"batched": 200.0, "single": 60.0},
        "run_speed": {"batched": 100.0, "single": 50.0},
        "cpu": cpu_name(),
        "folder_digest": digest,
        "run_digest": digest,
    }
    return {**entry, **changes}


def _chosen(run_dir: Path, **options) -> tuple[str, str, Path]:  # noqa: ANN003
    from nlptasks.inference.loading import prepare_load
    from nlptasks.types import LoadOptions

    prepared = prepare_load(run_dir, LoadOptions(**options))
    return prepared.options.backend, prepared.options.precision, prepared.folder


def test_the_precision_auto_answers_in_is_the_measured_one(runs, tmp_path):
    """A torch entry in deployments.json (the run's weights in bf16, measured at the end of the run)
    decides auto's precision: bf16 while it agrees, is batch-independent and faster on this CPU; fp32
    once measured here and refused; unmeasured (another CPU, a changed run): the run's training
    precision, as before.  Explicit choices are kept; the fastest of bf16 and an export answers."""
    run_dir = tiny_run(runs, "cls.toml", "deploy-precision", "data.max_train_rows=200")
    (run_dir / DEPLOYMENTS).unlink(missing_ok=True)

    def record(*entries: dict) -> None:
        (run_dir / DEPLOYMENTS).write_text(json.dumps({"deployments": list(entries)}), encoding="utf-8")

    assert _chosen(run_dir) == ("torch", "auto", run_dir)  # nothing measured: the training precision rule
    record(_precision_entry(run_dir))
    assert _chosen(run_dir) == ("torch", "bf16", run_dir)
    assert _chosen(run_dir, precision="fp32")[1] == "fp32"  # explicit choices are the user's
    assert _chosen(run_dir, backend="torch")[1] == "auto"
    for refused in (
        {"agrees": False, "why": "answers depend on the rows batched with it"},
        {"speed": {"batched": 102.0, "single": 60.0}},  # not 1.05x batched
        {"speed": {"batched": 200.0, "single": 40.0}},  # slower one at a time
    ):
        record(_precision_entry(run_dir, **refused))
        assert _chosen(run_dir) == ("torch", "fp32", run_dir), refused  # measured here: fp32
    for unmeasured in ({"cpu": "Some Other CPU"}, {"run_digest": "0" * 64}):
        record(_precision_entry(run_dir, **unmeasured))
        assert _chosen(run_dir) == ("torch", "auto", run_dir), unmeasured
    # beside an export: the larger speed-up over fp32 answers, whichever was measured first
    export = tmp_path / "fp32"
    from nlptasks.cli import main

    assert main(["export", str(run_dir), "--onnx", str(export), "--check-rows", "0"]) == 0
    onnx = _entry(run_dir)
    base = onnx["run_speed"]
    faster = {"batched": base["batched"] * 1.5, "single": base["single"] * 1.5}
    record(_precision_entry(run_dir), {**onnx, "agrees": True, "speed": faster})  # bf16 2x, onnx 1.5x
    assert _chosen(run_dir) == ("torch", "bf16", run_dir)
    faster = {"batched": base["batched"] * 3, "single": base["single"] * 3}
    record(_precision_entry(run_dir), {**onnx, "agrees": True, "speed": faster})
    assert _chosen(run_dir) == ("onnx", "auto", export.resolve())


def test_a_configuration_whose_answers_depend_on_the_batch_never_agrees(tmp_path):
    """The measurement compares each configuration's answers one at a time with its batched ones: a
    predictor whose scores move with its batch-mates is recorded as not agreeing, whatever its speed."""
    from nlptasks.pipeline.measuring import measure_deployment

    data = tmp_path / "validation.csv"
    data.write_text("text,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(40)), encoding="utf-8")
    manifest = {"data": {"sources": {"validation": str(data)}}}

    def steady(rows: list) -> list:
        return [{"label": str(int(r["text"][1:]) % 2), "score": 0.9} for r in rows]

    def moody(rows: list) -> list:  # scores (and a near-tie's label) depend on the batch's size
        return [{**a, "score": 0.9 - 0.001 * len(rows)} for a in steady(rows)]

    entry = measure_deployment(tmp_path, manifest, tmp_path, "moody", steady, moody)
    assert entry is not None and entry["agrees"] is False
    assert "depend on the rows batched with it" in entry["why"] and "floats move" in entry["why"]
    entry = measure_deployment(tmp_path, manifest, tmp_path, "steady", steady, steady)
    assert entry is not None and entry["agrees"] is True


@pytest.mark.alone  # its own load is the one measured: another test's beside it moves the ratio by 6%
@pytest.mark.parametrize("trend", ["busier", "quieter"])
def test_a_load_that_changes_during_the_measurement_favours_neither_side(trend, tmp_path):
    """Two predictors of the same cost, on a machine whose load grows (or falls) while they are
    measured: timed one after the other (best of each side's passes), the side measured first looked
    faster and `auto` could answer with it; timed in turn, neither is 5% ahead (MIN_SPEEDUP)."""
    import time

    from nlptasks.inference.deployments import MIN_SPEEDUP
    from nlptasks.pipeline.measuring import measure_deployment

    data = tmp_path / "validation.csv"
    data.write_text("text,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(40)), encoding="utf-8")
    manifest = {"data": {"sources": {"validation": str(data)}}}
    calls = 0

    def predictor(rows: list) -> list:  # each call costs more (or less) than the one before
        nonlocal calls
        calls += 1
        step = calls if trend == "busier" else 40 - calls
        time.sleep(0.002 * step * (1 + len(rows) / 40))  # milliseconds, well above the sleep's own jitter
        return [{"label": str(int(r["text"][1:]) % 2), "score": 0.9} for r in rows]

    entry = measure_deployment(tmp_path, manifest, tmp_path, "same", predictor, predictor, single_rows=4)
    assert entry is not None
    for way in ("batched", "single"):
        ratio = entry["speed"][way] / entry["run_speed"][way]
        assert 1 / MIN_SPEEDUP < ratio < MIN_SPEEDUP, (way, entry["speed"], entry["run_speed"])


@pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU does not compute in bf16 natively: nothing to measure")
def test_a_run_measures_bf16_at_its_end_and_infer_and_eval_follow(runs, cli, tmp_path):
    """On a CPU with native bf16, `nlptasks run` records its weights in bf16 against fp32; infer and
    eval then answer in the precision that record chooses."""
    import nlptasks

    run_dir = tiny_run(runs, "cls.toml", "deploy-measured", "data.max_train_rows=200")
    (entry,) = [e for e in read_deployments(run_dir) if e.get("backend") == "torch"]
    assert entry["precision"] == "bf16" and entry["split"] == "validation" and entry["rows"] > 0
    assert entry["speed"]["batched"] > 0 and entry["run_speed"]["single"] > 0
    from nlptasks.pipeline.measuring import measure_precisions

    slow = measure_precisions(run_dir, budget=1e-4)  # a predictor too slow for the time allowed: not measured
    assert isinstance(slow, str) and slow.startswith("not measured")
    record = {"deployments": [_precision_entry(run_dir)]}  # a qualifying record (tiny models' speed is noise)
    (run_dir / DEPLOYMENTS).write_text(json.dumps(record), encoding="utf-8")
    code, stdout, err = cli("infer", "--model", run_dir, *CLS_TEXTS)
    assert code == 0, err
    answers = [json.loads(line) for line in stdout.splitlines()]
    assert answers == nlptasks.load(run_dir, backend="torch", precision="bf16")(CLS_TEXTS)
    data = ROOT / "recipes" / "data" / "cls" / "test.csv"
    code, _, err = cli("eval", run_dir, "--data", data, "--output", tmp_path / "ev")
    assert code == 0, err
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["precision"] == "bf16"
    code, _, err = cli("eval", run_dir, "--data", data, "--precision", "fp32", "--output", tmp_path / "pinned")
    assert code == 0, err  # --precision insists over the record, as it does for infer
    pinned = json.loads((tmp_path / "pinned" / "metrics.json").read_text())
    assert pinned["precision"] == "fp32"
    record = {"deployments": [_precision_entry(run_dir, agrees=False)]}
    (run_dir / DEPLOYMENTS).write_text(json.dumps(record), encoding="utf-8")
    code, _, err = cli("eval", run_dir, "--data", data, "--output", tmp_path / "ev32")
    assert code == 0, err
    assert json.loads((tmp_path / "ev32" / "metrics.json").read_text())["precision"] == "fp32"
    code, _, err = cli("eval", run_dir, "--data", data, "--precision", "bf16", "--output", tmp_path / "ev16")
    assert code == 0, err
    assert json.loads((tmp_path / "ev16" / "metrics.json").read_text())["precision"] == "bf16"
    both = ("--precision", "fp32", "--set", "train.precision=bf16", "--output", tmp_path / "both")
    code, _, err = cli("eval", run_dir, "--data", data, *both)
    assert code != 0 and "--precision fp32 and --set train.precision=bf16 both choose" in err
    assert not (tmp_path / "both").exists()
