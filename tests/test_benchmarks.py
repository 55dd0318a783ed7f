"""Every benchmark in benchmarks/ writes its own table into docs/benchmarks.md (issue 7).

A benchmark is a ``benchmarks/*.py`` that does not start with ``_`` and does not declare
``PEER_OF`` (the plain-transformers sides, plain_cls.py and ner_plain.py, do): the rule lives in
``benchmarks/_docs.py`` (``benchmark_scripts``).  Nothing here trains: ``--help`` only, and the
block writer on a temporary file.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from conftest import run_process

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


def _load_docs_module():
    spec = importlib.util.spec_from_file_location("benchmarks_docs", ROOT / "benchmarks" / "_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_docs = _load_docs_module()
SCRIPTS = _docs.benchmark_scripts()


def test_benchmarks_and_peers_are_told_apart():
    names = {p.stem for p in SCRIPTS}
    assert {"cold_start", "infer_speed", "cls_overhead", "ner_overhead", "padding", "sft_packing", "ladder"} <= names
    assert not names & {"plain_cls", "ner_plain", "plain_st", "trl_sft", "trl_dpo", "plain_multilabel", "_docs"}
    peers = {p.name: _docs.peer_of(p) for p in (ROOT / "benchmarks").glob("[!_]*.py") if _docs.peer_of(p)}
    assert peers == {
        "plain_cls.py": "cls_overhead.py",
        "ner_plain.py": "ner_overhead.py",
        "plain_st.py": "pair_st.py",
        "trl_sft.py": "sft_trl.py",
        "trl_dpo.py": "dpo_trl.py",
        "plain_multilabel.py": "multilabel.py",
    }
    for peer in peers.values():
        assert (ROOT / "benchmarks" / peer).exists()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_benchmark_has_help_docs_option_and_block(script: Path):
    proc = run_process([sys.executable, str(script), "--help"], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "--docs " in proc.stdout and "--docs-file" in proc.stdout, f"{script.name} has no --docs option"
    text = DOCS.read_text(encoding="utf-8")
    names = re.findall(rf"<!-- ({re.escape(script.stem)}(?:-[\w.-]+)?):begin -->", text)
    assert names, f"docs/benchmarks.md has no <!-- {script.stem}[-SUFFIX]:begin --> block"
    for name in names:
        assert text.index(f"<!-- {name}:end -->") > text.index(f"<!-- {name}:begin -->")


def test_replace_block_replaces_and_appends(tmp_path):
    doc = tmp_path / "bench.md"
    doc.write_text("# B\n\nintro\n<!-- a:begin -->\nold table\n<!-- a:end -->\n\nafter\n", encoding="utf-8")
    _docs.replace_block(doc, "a", "| new | table |\n")
    _docs.replace_block(doc, "b", "second")
    assert doc.read_text(encoding="utf-8") == (
        "# B\n\nintro\n<!-- a:begin -->\n| new | table |\n<!-- a:end -->\n\nafter\n\n"
        "<!-- b:begin -->\nsecond\n<!-- b:end -->\n"
    )
    _docs.replace_block(doc, "b", "third")  # the appended block is replaced in turn, not appended again
    assert doc.read_text(encoding="utf-8").count("<!-- b:begin -->") == 1
    assert "third" in doc.read_text(encoding="utf-8") and "second" not in doc.read_text(encoding="utf-8")


def test_header_and_publish(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    info = _docs.start(str(ROOT / "benchmarks" / "padding.py"), ["--train-rows", "64", "--docs"])
    header = info.header()
    assert header.startswith("`OMP_NUM_THREADS=1 python benchmarks/padding.py --train-rows 64 --docs`, ")
    assert re.search(r", \d{4}-\d\d-\d\d \d\d:\d\d UTC; ", header)
    assert re.search(
        r"machine: \d+ CPU cores \(.+\), torch \S+ \(\d+ threads?\), 1-minute load average [\d.]+ at the start", header
    ), header
    assert _docs.block_name("benchmarks/cls_overhead.py", "mrpc-minilm") == "cls_overhead-mrpc-minilm"

    doc = tmp_path / "bench.md"
    doc.write_text("<!-- padding:begin -->\n<!-- padding:end -->\n", encoding="utf-8")
    args = argparse.Namespace(docs=False, docs_file=doc)
    _docs.publish(args, "padding", info, "| x |", "Intro.")
    assert (
        doc.read_text(encoding="utf-8") == "<!-- padding:begin -->\n<!-- padding:end -->\n"
    )  # no --docs: printed only
    assert "| x |" in capsys.readouterr().out
    args.docs = True
    _docs.publish(args, "padding", info, "| x |", "Intro.")
    assert (
        doc.read_text(encoding="utf-8") == f"<!-- padding:begin -->\n{header} Intro.\n\n| x |\n<!-- padding:end -->\n"
    )


def test_docs_file_must_exist_before_the_run(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    _docs.add_arguments(parser)
    assert parser.parse_args([]).docs_file == DOCS
    with pytest.raises(SystemExit):
        parser.parse_args(["--docs", "--docs-file", str(tmp_path / "missing.md")])
    assert "copy docs/benchmarks.md there first" in capsys.readouterr().err


def test_mlm_gain_sides_share_one_recipe_but_the_model(tmp_path):
    """benchmarks/mlm_gain.py compares two fine-tuning runs per task and seed: everything but the
    model is one recipe (precision included: "auto" would give the loaded model bf16 on a CPU that
    has it and the model built from scratch fp32), and the scratch side builds the mlm recipe's model."""
    import tomllib

    import nlptasks

    spec = importlib.util.spec_from_file_location("mlm_gain", ROOT / "benchmarks" / "mlm_gain.py")
    mlm_gain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mlm_gain)
    args = argparse.Namespace(cls_rows=0, ner_rows=300, pair_rows=0, epochs=3, max_length=128)
    mlm_run = tmp_path / "runs" / "mlm" / "mlm"
    mlm_run.mkdir(parents=True)
    for name in mlm_gain.TASKS:
        scratch, same = mlm_gain.finetune_recipe(tmp_path, name, args, 7, None)
        assert not same  # a new file: nothing to reuse
        loaded, same = mlm_gain.finetune_recipe(tmp_path, name, args, 7, mlm_run)
        assert (scratch.name, loaded.name) == (f"{name}-scratch-7.toml", f"{name}-mlm-7.toml")
        assert mlm_gain.finetune_recipe(tmp_path, name, args, 7, mlm_run) == (loaded, True)  # --reuse may read it
        a, b = (tomllib.loads(p.read_text(encoding="utf-8")) for p in (scratch, loaded))
        assert a["model"].pop("scratch") == mlm_gain.scratch_table()
        assert b["model"].pop("name_or_path") == str(mlm_run)
        assert a == b and a["train"]["precision"] == "fp32" and a["seed"] == 7
        assert ("max_train_rows" in a["data"]) == (name == "msra")
        if (ROOT.parent / "shared" / "data").is_dir():  # both are recipes nlptasks takes as they are
            nlptasks.load_recipe(scratch)
            nlptasks.load_recipe(loaded)
