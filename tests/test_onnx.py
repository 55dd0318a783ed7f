"""``nlptasks export RUN --onnx OUT`` and the ONNX Runtime backend: fp32 exports predict exactly
what the torch run predicts (labels, entities, similarities; scores within 1e-4) through every
task's own predictor, at any batch size and length; int8 exports run, mostly agree and are smaller;
adapter runs export merged; generation is refused; the backend choice errors are clear."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from conftest import CLS_TEXTS, PAIRS, ROOT, TINY_DECODER, tiny_run  # noqa: E402

_RUNS: dict[str, Path] = {}


def _run(runs: Path, key: str, recipe: str, *sets: str, **kw) -> Path:  # noqa: ANN003
    """The tiny run ``key`` of this module, trained by the first test that asks for it."""
    if key not in _RUNS or not _RUNS[key].exists():
        _RUNS[key] = tiny_run(runs, recipe, key, *sets, **kw)
    return _RUNS[key]


def export(cli, run_dir: Path, out: Path, *extra: str) -> tuple[dict, str, str]:
    code, stdout, stderr = cli("export", run_dir, "--onnx", out, *extra)
    assert code == 0, stderr
    return json.loads((out / "nlptasks.json").read_text(encoding="utf-8")), stdout, stderr


def both(run_dir: Path, out: Path, inputs: list, batch_size: int = 32) -> tuple[list, list]:
    import nlptasks

    torch_predictor = nlptasks.load(run_dir, backend="torch", precision="fp32")
    onnx_predictor = nlptasks.load(out)
    assert type(onnx_predictor.model).__name__ == "OnnxModel"
    torch_predictor.batch_size = onnx_predictor.batch_size = batch_size
    return torch_predictor(inputs), onnx_predictor(inputs)


def own_figures(cli, export_dir: Path, data: Path) -> None:
    """The export's metrics.json is its own: `nlptasks eval EXPORT` on the run's test file gives
    it to the digit (timings aside), and the card quotes it."""
    own = json.loads((export_dir / "metrics.json").read_text(encoding="utf-8"))
    assert own["measured"]["file"] == str(data) and own["exported_from"]["run"]
    out = export_dir.parent / f"own-{export_dir.name}"
    code, _, err = cli("eval", export_dir, "--data", data, "--output", out)
    assert code == 0, err
    again = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["test"]
    timing = ("runtime", "per_second")
    assert {k: v for k, v in own["test"].items() if not k.endswith(timing)} == {
        k: v for k, v in again.items() if not k.endswith(timing)
    }
    card = (export_dir / "README.md").read_text(encoding="utf-8")
    key = next(k for k in ("accuracy", "f1", "spearman") if k in own["test"])
    assert f"| {key} | {own['test'][key]:.4f} |" in card


def same_eval(cli, run_dir: Path, export_dir: Path, data: Path, tol: float = 1e-4) -> dict:
    """`nlptasks eval` of the fp32 export scores ``data`` as the torch run does (every figure but
    the timings, within ``tol``); returns the export's metrics."""
    figures = []
    for folder, backend in ((run_dir, "torch"), (export_dir, "auto")):  # torch: not an export that answers for it
        out = export_dir.parent / f"eval-{folder.name}"
        code, _, err = cli("eval", folder, "--data", data, "--output", out, "--backend", backend)
        assert code == 0, err
        metrics = json.loads((out / "metrics.json").read_text())["test"]
        figures.append({k: v for k, v in metrics.items() if not k.endswith(("runtime", "per_second"))})
    assert figures[0].keys() == figures[1].keys()
    for key, value in figures[0].items():
        other = figures[1][key]
        assert other == (pytest.approx(value, abs=tol) if isinstance(value, float) else value), key
    return figures[1]


def near(a: list[float], b: list[float], tol: float = 1e-4) -> None:
    assert a == pytest.approx(b, abs=tol)


def test_cls_fp32_equal_and_int8_smaller(runs, cli, tmp_path):
    run_dir = _run(runs, "cls", "cls.toml", "data.max_train_rows=300")
    manifest, stdout, _ = export(cli, run_dir, tmp_path / "fp32")
    info = manifest["onnx"]
    assert manifest["backend"] == "onnx" and info["quantize"] == "none" and info["opset"] == 17
    assert info["outputs"] == {"logits": ["batch", 2]}
    assert info["check"]["max_abs_diff"] < 1e-4
    assert info["measured"]["inputs"] == 200 and info["measured"]["changed"] == 0
    assert info["measured"]["gold"]["label"]["change_points"] == 0
    assert "0 predictions differ" in stdout
    assert (tmp_path / "fp32" / "COMPLETE").exists() and "ONNX export" in (tmp_path / "fp32" / "README.md").read_text()
    for batch_size in (1, 7, 64):  # dynamic batch; texts from 1 character to past max_length
        a, b = both(run_dir, tmp_path / "fp32", CLS_TEXTS, batch_size)
        assert [r["label"] for r in a] == [r["label"] for r in b]
        near([r["score"] for r in a], [r["score"] for r in b])

    manifest8, _, _ = export(cli, run_dir, tmp_path / "int8", "--quantize", "int8")
    sizes = manifest8["onnx"]["sizes"]
    assert sizes["int8_bytes"] < 0.7 * sizes["fp32_bytes"]
    assert (tmp_path / "int8" / "model.onnx").stat().st_size == sizes["int8_bytes"]
    assert not (tmp_path / "int8" / "model-fp32.onnx").exists()
    a, b = both(run_dir, tmp_path / "int8", CLS_TEXTS)
    same = sum(x["label"] == y["label"] for x, y in zip(a, b, strict=True))
    assert same >= 0.9 * len(a)
    assert manifest8["onnx"]["measured"]["changed"] <= 0.1 * manifest8["onnx"]["measured"]["inputs"]
    own_figures(cli, tmp_path / "int8", ROOT / "recipes" / "data" / "cls" / "test.csv")  # int8's own, not torch's
    run_figures = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert json.loads((tmp_path / "int8" / "metrics.json").read_text())["exported_from"]["metrics"] == run_figures

    code, out, _ = cli("infer", "--model", tmp_path / "int8", "服务很好")  # the CLI picks ONNX by itself
    assert code == 0 and json.loads(out)["label"] in manifest["labels"]

    from nlptasks.inference.onnx_export import int8_weight_type

    assert manifest8["onnx"]["weight_type"] == int8_weight_type()  # auto: this CPU's (QInt8 with VNNI)
    other = "QUInt8" if int8_weight_type() == "QInt8" else "QInt8"
    chosen, _, _ = export(cli, run_dir, tmp_path / "other", "--quantize", "int8", "--int8-weights", other)
    assert chosen["onnx"]["weight_type"] == other
    assert chosen["onnx"]["measured"]["changed"] <= 0.1 * chosen["onnx"]["measured"]["inputs"]


def test_ner_windows_and_offsets(runs, cli, tmp_path):
    run_dir = _run(runs, "ner", "ner.toml", "data.max_train_rows=300")
    manifest, _, _ = export(cli, run_dir, tmp_path / "ner")
    assert manifest["onnx"]["outputs"]["logits"][:2] == ["batch", "sequence"]
    measured = manifest["onnx"]["measured"]
    assert measured["changed"] == 0 and "tags" in measured["gold"]
    long = "张伟在华星科技公司工作，后来去了北京大学读书。" * 6  # windowed: longer than max_length
    texts = ["小明在北京大学读书", long, "", "李娜去了杭州", {"tokens": list("王芳在上海")}, long[:70], "张"]
    for batch_size in (1, 7):
        a, b = both(run_dir, tmp_path / "ner", texts, batch_size)
        for x, y in zip(a, b, strict=True):
            assert [(e["type"], e["start"], e["end"]) for e in x["entities"]] == [
                (e["type"], e["start"], e["end"]) for e in y["entities"]
            ]
            near([e["score"] for e in x["entities"]], [e["score"] for e in y["entities"]])
            assert x.get("tags") == y.get("tags")
    code, out, _ = cli(
        "infer", "--model", tmp_path / "ner", "--format", "conll", "--file", _conll(tmp_path / "in.conll")
    )
    assert code == 0 and len(out.strip().splitlines()) == 5
    figures = same_eval(cli, run_dir, tmp_path / "ner", ROOT / "recipes" / "data" / "ner" / "test.jsonl")
    own_figures(cli, tmp_path / "ner", ROOT / "recipes" / "data" / "ner" / "test.jsonl")
    assert "f1" in figures and figures["loss"] is not None


def _conll(path: Path) -> Path:
    path.write_text("\n".join("王芳在上海") + "\n", encoding="utf-8")
    return path


def test_pair_cross_encoder(runs, cli, tmp_path):
    run_dir = _run(runs, "cross", "pair.toml", "data.max_train_rows=400")
    export(cli, run_dir, tmp_path / "cross")
    a, b = both(run_dir, tmp_path / "cross", PAIRS, 4)
    assert [r["label"] for r in a] == [r["label"] for r in b]
    near([r["score"] for r in a], [r["score"] for r in b])
    same_eval(cli, run_dir, tmp_path / "cross", ROOT / "recipes" / "data" / "pair" / "test.csv")
    own_figures(cli, tmp_path / "cross", ROOT / "recipes" / "data" / "pair" / "test.csv")


def test_pair_bi_encoder_and_ranking(runs, cli, tmp_path):
    import nlptasks

    run_dir = _run(runs, "bi", "pair.toml", "options.mode=bi", "data.max_train_rows=400")
    manifest, _, _ = export(cli, run_dir, tmp_path / "bi")
    assert "last_hidden_state" in manifest["onnx"]["outputs"]
    a, b = both(run_dir, tmp_path / "bi", PAIRS, 4)
    assert [r.get("label") for r in a] == [r.get("label") for r in b]
    near([r["similarity"] for r in a], [r["similarity"] for r in b])
    queries, candidates = [x for x, _ in PAIRS], [y for _, y in PAIRS]
    ranked = [
        nlptasks.load(d, **kw).rank(queries, candidates, top_k=3)
        for d, kw in ((run_dir, {"backend": "torch"}), (tmp_path / "bi", {}))
    ]
    for x, y in zip(*ranked, strict=True):
        assert [c["candidate"] for c in x["results"]] == [c["candidate"] for c in y["results"]]
    same_eval(cli, run_dir, tmp_path / "bi", ROOT / "recipes" / "data" / "pair" / "test.csv")
    own_figures(cli, tmp_path / "bi", ROOT / "recipes" / "data" / "pair" / "test.csv")


def test_lora_run_exports_merged(runs, cli, tmp_path):
    run_dir = _run(runs, "lora", "cls.toml", "data.max_train_rows=300", "peft.method=lora")
    manifest, _, _ = export(cli, run_dir, tmp_path / "lora")
    assert "peft" not in manifest and manifest["merged_from"]["method"] == "lora"
    assert manifest["onnx"]["measured"]["changed"] == 0
    a, b = both(run_dir, tmp_path / "lora", CLS_TEXTS, 7)
    assert [r["label"] for r in a] == [r["label"] for r in b]
    near([r["score"] for r in a], [r["score"] for r in b])


def test_backend_choice_errors(runs, cli, tmp_path):
    run_dir = _run(runs, "cls", "cls.toml", "data.max_train_rows=300")
    code, _, err = cli("infer", "--model", run_dir, "--backend", "onnx", "好")
    assert code != 0 and "nlptasks export" in err and "--onnx OUT" in err
    export(cli, run_dir, tmp_path / "x", "--check-rows", "0")
    code, _, err = cli("infer", "--model", tmp_path / "x", "--backend", "torch", "好")
    assert code != 0 and "no torch weights" in err and str(run_dir.resolve()) in err
    code, _, err = cli("infer", "--model", run_dir, "--backend", "torch", "好")
    assert code == 0, err
    import nlptasks  # the choice was for those loads only: later loads in the process pick by folder

    assert type(nlptasks.load(tmp_path / "x").model).__name__ == "OnnxModel"
    assert type(nlptasks.load(run_dir, backend="torch").model).__name__ != "OnnxModel"
    data = ROOT / "recipes" / "data" / "cls" / "test.csv"
    for command in (("eval", run_dir, "--data", data, "--backend", "onnx"), ("serve", run_dir, "--backend", "onnx")):
        code, _, err = cli(*command)  # eval and serve choose as infer does, before reading data or serving
        assert code != 0 and "--backend onnx" in err and "nlptasks export" in err, err
    for command in (
        ("eval", tmp_path / "x", "--data", data, "--backend", "torch"),
        ("serve", tmp_path / "x", "--backend", "torch"),
    ):
        code, _, err = cli(*command)
        assert code != 0 and "no torch weights" in err and str(run_dir.resolve()) in err, err
    code, _, err = cli("eval", run_dir, "--data", data, "--backend", "torch", "--output", tmp_path / "ev")
    assert code == 0, err
    code, _, err = cli("export", run_dir, "--onnx", tmp_path / "x")
    assert code != 0 and "not empty" in err
    with pytest.raises(SystemExit):  # argparse: exactly one of --merge and --onnx
        cli("export", run_dir, "--onnx", tmp_path / "y", "--merge", tmp_path / "z")


def test_missing_onnxruntime_is_a_clear_error(monkeypatch, tmp_path):
    import sys

    from nlptasks.errors import NlptasksError
    from nlptasks.inference.onnx_backend import require_onnxruntime

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(NlptasksError) as info:
        require_onnxruntime()
    assert 'pip install "nlptasks[onnx]"' in str(info.value.hint)


def test_sft_is_refused_with_the_reason(runs, cli, tmp_path):
    run_dir = _run(
        runs,
        "sft",
        "sft.toml",
        "peft.method=none",
        "data.max_train_rows=16",
        "data.test=",
        "options.generation_eval.rows=1",
        "options.generation_eval.max_new_tokens=2",
        tiny=TINY_DECODER,
    )
    code, _, err = cli("export", run_dir, "--onnx", tmp_path / "sft")
    assert code != 0 and "generat" in err and "KV cache" in err
    assert not (tmp_path / "sft" / "COMPLETE").exists()


def test_serve_and_eval_take_the_export(runs, cli, tmp_path):
    """The exported folder is a run `nlptasks serve` serves (through the same predictor, on
    onnxruntime), answering what infer prints; `nlptasks eval` scores it as the torch run (fp32) and
    as the export measured itself (int8)."""
    from fastapi.testclient import TestClient

    from nlptasks.serve.app import create_app
    from nlptasks.serve.models import load_models
    from nlptasks.serve.state import ServerState

    run_dir = _run(runs, "cls", "cls.toml", "data.max_train_rows=300")
    export(cli, run_dir, tmp_path / "fp32")
    models = load_models([tmp_path / "fp32"], ["exported"])
    assert type(models["exported"].predictor.model).__name__ == "OnnxModel"
    with TestClient(create_app(ServerState(models))) as client:
        answer = client.post("/v1/predict/exported", json={"inputs": CLS_TEXTS[:5]})
    assert answer.status_code == 200, answer.text
    import nlptasks

    assert answer.json()["outputs"] == nlptasks.load(tmp_path / "fp32")(CLS_TEXTS[:5])
    same_eval(cli, run_dir, tmp_path / "fp32", ROOT / "recipes" / "data" / "cls" / "test.csv")
    int8, _, _ = export(cli, run_dir, tmp_path / "int8", "--quantize", "int8")
    code, _, err = cli(
        "eval",
        tmp_path / "int8",
        "--data",
        ROOT / "recipes" / "data" / "cls" / "test.csv",
        "--output",
        tmp_path / "eval-int8",
    )
    assert code == 0, err
    measured = json.loads((tmp_path / "eval-int8" / "metrics.json").read_text())["test"]["accuracy"]
    assert measured == pytest.approx(
        int8["onnx"]["measured"]["gold"]["label"]["onnx"], abs=1e-6
    )  # the export's own figure
