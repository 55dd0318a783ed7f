"""End-to-end through the CLI: train the quickstart on a tiny model, infer, and every bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import RECIPES, ROOT, TINY, nlptasks, read_metrics, tiny_run, write_csv

QUICKSTART = RECIPES / "cls.toml"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The quickstart as shipped (about 15 s here), shared by the inference tests; a subprocess, like a user."""
    runs = tmp_path_factory.mktemp("work")
    proc = nlptasks("run", QUICKSTART, "--no-progress", "--set", "output.run_name=quick", cwd=runs)
    assert proc.returncode == 0, proc.stderr
    return runs, runs / "runs" / "cls" / "quick", proc


def test_run_writes_a_complete_run(trained):
    _, run_dir, proc = trained
    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "labels.json",
        "recipe.toml",
        "metrics.json",
        "nlptasks.json",
        "COMPLETE",
    ):
        assert (run_dir / name).is_file(), name
    assert not (run_dir / "checkpoints").exists()
    metrics = read_metrics(run_dir)
    # measured 0.975 / 0.945 (2026-11-23, 2-core CPU); floors leave room for other hardware
    assert metrics["validation"]["accuracy"] > 0.9
    assert metrics["test"]["accuracy"] > 0.88
    assert {"f1/正面", "f1/负面", "f1_macro"} <= set(metrics["test"])
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "cls" and manifest["labels"] == ["正面", "负面"]
    assert {p["name"] for p in manifest["plugins"]} == {"nlptasks.engine", "cls"}
    assert manifest["versions"]["transformers"].startswith("5.")
    # the final table and where the model went
    assert "accuracy" in proc.stdout and "per class (test)" in proc.stdout
    assert "model saved to runs/cls/quick" in proc.stdout
    # stdout holds only the table; progress lines are readable one-liners on stderr, no bars
    assert "{'" not in proc.stdout and "{'" not in proc.stderr
    assert "validation (epoch 4): loss" in proc.stderr and "training done:" in proc.stderr
    assert "it/s]" not in proc.stderr and "examples/s]" not in proc.stderr


def test_saved_recipe_is_the_resolved_one(trained):
    import tomllib

    _, run_dir, _ = trained
    saved = tomllib.loads((run_dir / "recipe.toml").read_text(encoding="utf-8"))
    assert saved["output"]["run_name"] == "quick"  # the override
    assert saved["train"]["padding"] == "dynamic"  # a default, filled in
    assert saved["options"]["text_column"] == "text"


def test_infer_uses_the_latest_run_and_prints_json(trained):
    cwd, _, _ = trained
    proc = nlptasks("infer", "--task", "cls", "这家酒店服务很好，房间也干净", "房间又脏又吵，太差了", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["label"] for r in lines] == ["正面", "负面"]
    assert all(0.5 <= r["score"] <= 1 for r in lines)


def test_infer_reads_files_and_stdin(trained, tmp_path, cli):
    """txt, jsonl and csv files in-process; real stdin through a fresh process."""
    cwd, run_dir, _ = trained
    txt = tmp_path / "in.txt"
    txt.write_text("服务很好\n\n太差了\n", encoding="utf-8")
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"text": "服务很好"}\n{"text": "太差了"}\n', encoding="utf-8")
    csv = write_csv(tmp_path / "in.csv", [("服务很好", ""), ("太差了", "")])
    outs = []
    for path in (txt, jsonl, csv):
        code, out, err = cli("infer", "--model", str(run_dir), "--file", str(path))
        assert code == 0, err
        outs.append([json.loads(line)["label"] for line in out.splitlines()])
    proc = nlptasks("infer", "--model", str(run_dir), cwd=cwd, input="服务很好\n太差了\n")
    outs.append([json.loads(line)["label"] for line in proc.stdout.splitlines()])
    assert outs[0] == outs[1] == outs[2] == outs[3]
    assert len(outs[0]) == 2


def test_plain_transformers_pipeline_gives_the_same_labels(trained):
    from transformers import pipeline

    from nlptasks import LoadOptions
    from nlptasks.pipeline import load_predictor

    _, run_dir, _ = trained
    texts = ["这家酒店服务很好，房间也干净", "房间又脏又吵，太差了", "早餐一般，位置不错", "还行"]
    ours = load_predictor(run_dir, LoadOptions(precision="fp32"))(texts)  # as the pipeline: fp32
    theirs = pipeline("text-classification", model=str(run_dir))(texts)
    assert [r["label"] for r in ours] == [r["label"] for r in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-4)
    # every class's score, as the pipeline gives them with top_k=None
    every = pipeline("text-classification", model=str(run_dir), top_k=None)(texts)
    for a, b in zip(ours, every, strict=True):
        assert a["scores"] == pytest.approx({c["label"]: c["score"] for c in b}, abs=1e-4)
        assert a["scores"][a["label"]] == a["score"] == max(a["scores"].values())
        assert sum(a["scores"].values()) == pytest.approx(1, abs=1e-5)


def test_batched_inference_keeps_the_input_order(trained):
    from nlptasks.pipeline import load_predictor

    _, run_dir, _ = trained
    predictor = load_predictor(run_dir)
    texts = [
        "好",
        "房间又脏又吵，太差了，再也不来了！！",
        "服务很好",
        "差",
        "这家酒店服务很好，房间也干净，早餐丰富",
    ] * 3
    one_by_one = [predictor([t])[0] for t in texts]
    predictor.batch_size = 4
    batched = predictor(texts)
    assert [r["text"] for r in batched] == texts
    assert [r["label"] for r in batched] == [r["label"] for r in one_by_one]
    for a, b in zip(batched, one_by_one, strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-4)


def test_infer_without_a_run_says_how_to_make_one(tmp_path):
    proc = nlptasks("infer", "--task", "cls", "好", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no complete 'cls' run" in proc.stderr
    assert "nlptasks run recipes/cls.toml" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.alone  # a time on this machine: measured with no other test beside it
def test_help_is_instant_and_imports_nothing_heavy():
    code = (
        "import sys, time; t = time.perf_counter();"
        "from nlptasks.cli import build_parser; build_parser().format_help();"
        "heavy = [m for m in ('torch', 'transformers', 'datasets', 'peft', 'pydantic') if m in sys.modules];"
        "print(heavy, time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    heavy, seconds = out.rsplit(" ", 1)
    assert heavy == "[]"
    assert float(seconds) < 0.5
    start = time.perf_counter()
    proc = nlptasks("--help")
    assert proc.returncode == 0 and "nlptasks run recipes/cls.toml" in proc.stdout
    assert time.perf_counter() - start < 3  # interpreter start included; generous for a loaded CI box


def test_validate_notes_what_this_machine_cannot_run(cli):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    code, out, err = cli("validate", str(RECIPES / "hub" / "sft-qwen-qlora.toml"))
    assert code == 0 and out.startswith("ok: ")  # a valid recipe, for a GPU
    assert "note: valid, but `nlptasks run` refuses it on this machine:" in err
    assert "note:   peft.quantization: '4bit' loads the base with bitsandbytes, which needs a CUDA GPU" in err
    assert "--set peft.quantization=none" in err
    code, _, err = cli("validate", str(RECIPES / "cls.toml"), "--set", "train.precision=fp16")
    assert code == 0 and "train.precision: fp16 needs a CUDA GPU" in err and "--set train.precision=auto" in err
    code, _, err = cli("validate", str(RECIPES / "cls.toml"))
    assert code == 0 and "refuses" not in err


def test_validate_and_plugins_and_schema(cli):
    code, out, _ = cli("validate", QUICKSTART)
    assert code == 0 and out.startswith("ok: ")
    code, out, _ = cli("plugins", "--json")
    payload = json.loads(out)
    assert payload["tasks"]["cls"]["plugin"] == "cls"
    assert any(p["name"] == "nlptasks.engine" for p in payload["plugins"])
    code, out, _ = cli("schema")
    assert json.loads(out)["title"] == "nlptasks recipe"


# --- bad input: non-zero exit, one line per problem naming the key or file/row, no traceback ---------


def bad_run(tmp_path, *sets: str, recipe=QUICKSTART):
    """A run that must stop with exit 2 and a clean error (in-process: a fresh process adds
    nothing here; test_debug_shows_the_traceback and the README tests start real ones)."""
    from nlptasks.testing import run_cli

    argv = ["run", str(recipe), "--no-progress", "--set", f"output.dir={tmp_path / 'runs'}"]
    for s in [*TINY, *sets]:
        argv += ["--set", s]
    code, _, err = run_cli(*argv)
    assert code == 2, err
    assert "Traceback" not in err
    return err


def test_misspelt_and_mistyped_keys(tmp_path):
    err = bad_run(tmp_path, "train.learnign_rate=1e-3", "train.epochs=three", "options.labell_column=y")
    lines = err.splitlines()
    assert "3 problems" in lines[0]
    assert "  train.learnign_rate: unknown key (did you mean 'learning_rate'?)" in lines
    assert any(line.startswith("  train.epochs: ") for line in lines)
    assert any(line.startswith("  options.labell_column: unknown key (did you mean 'label_column'?)") for line in lines)
    assert "nlptasks schema" in lines[-1]


def test_missing_data_file(tmp_path):
    err = bad_run(tmp_path, f"data.train={tmp_path / 'nope.csv'}")
    assert f"  data.train: file not found: {tmp_path / 'nope.csv'}" in err.splitlines()


def test_unseen_label_names_file_row_and_label(tmp_path):
    train = write_csv(tmp_path / "train.csv", [("好", "pos"), ("坏", "neg")] * 20)
    val = write_csv(tmp_path / "val.csv", [("好", "pos"), ("一般", "meh")])
    err = bad_run(tmp_path, f"data.train={train}", f"data.validation={val}", "data.test=''")
    assert f"{val}:2: label 'meh' does not occur in the training data" in err


def test_missing_column_says_which_option(tmp_path):
    train = write_csv(tmp_path / "train.csv", [("好", "pos"), ("坏", "neg")] * 20, header="review,label")
    err = bad_run(tmp_path, f"data.train={train}", "data.validation=''", "data.test=''")
    assert "no column 'text' (options.text_column); the columns are: review, label" in err
    assert "--set options.text_column=NAME" in err


def test_empty_rows_are_dropped_and_counted(tmp_path):
    rows = [("好极了", "pos"), ("太坏了", "neg")] * 30 + [("", "pos"), ("   ", "neg"), ("还行", "")]
    train = write_csv(tmp_path / "train.csv", rows)
    run_dir = tiny_run(tmp_path / "runs", QUICKSTART, "t", f"data.train={train}", "data.validation=''", "data.test=''")
    metrics = read_metrics(run_dir)
    assert metrics["dropped"]["train"] == {"empty text": 2, "empty label": 1}
    assert set(metrics) >= {"validation", "test"}  # carved out of train: 10% + 10%


def test_all_rows_empty_is_an_error(tmp_path):
    train = write_csv(tmp_path / "train.csv", [("", "pos"), (" ", "neg")])
    err = bad_run(tmp_path, f"data.train={train}", "data.validation=''", "data.test=''", "data.split.validation=0.5")
    assert "Traceback" not in err and str(train) in err


def test_invalid_jsonl_names_the_line(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "好", "label": "a"}\n{"text": "坏", "label": \n', encoding="utf-8")
    err = bad_run(tmp_path, f"data.train={train}", "data.validation=''", "data.test=''")
    assert f"{train}:2: invalid JSON" in err


def test_debug_shows_the_traceback(tmp_path):
    proc = nlptasks("--debug", "run", str(QUICKSTART), "--set", "train.epochs=0", cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def _readme_commands() -> dict[str, str]:
    """The numbered commands of the README's first code block (``# 1. ...`` then the command)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands, number = {}, None
    for line in block.splitlines():
        if line.startswith("# ") and line[2:3].isdigit():
            number = line[2]
        elif line.strip() and number:
            commands[number] = line.strip()
            number = None
    return commands


def test_readme_first_commands_match_ci_and_the_cli():
    """The README's second command is what CI runs, verbatim, and CI runs the slow tier too; every
    nlptasks call of the first command parses and its recipe validates."""
    import shlex

    from nlptasks.cli import build_parser
    from nlptasks.pipeline import load_recipe

    commands = _readme_commands()
    assert set(commands) == {"1", "2"}
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert commands["2"] in ci and commands["2"].endswith("python -m pytest")
    assert any(line.strip().startswith("python -m pytest --slow") for line in ci)  # the real-data tier
    calls = [shlex.split(part.strip()) for part in commands["1"].split("&&") if part.strip().startswith("nlptasks ")]
    assert [c[1] for c in calls] == ["run", "infer"]
    for call in calls:
        args = build_parser().parse_args(call[1:])
        if args.command == "run":
            assert load_recipe(ROOT / args.recipe).task.name == "cls"
        else:
            assert args.task == "cls" and args.texts
