"""Damaged artifacts are named, never trusted (docs/reliability.md, class 3).

A run and an export record the sha256 of every file loading reads in ``SHA256SUMS``, written with
``COMPLETE``; loading (``infer``, ``eval``, ``serve``, ``nlptasks.load``, ``export``) checks it
first, and a missing or changed file is one ``error:`` naming the file, with the command that makes
the folder again.  A folder without ``SHA256SUMS`` (made before) still loads; a model file that
cannot be read there is still an error naming it, not a library's traceback.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, tiny_run

SMALL = ("data.max_train_rows=64", "data.max_eval_rows=8")
TEST_CSV = ROOT / "recipes" / "data" / "cls" / "test.csv"


@pytest.fixture(scope="module")
def cls_run(runs):
    return tiny_run(runs, "cls.toml", "t", *SMALL)


@pytest.fixture(scope="module")
def onnx_run(runs, cls_run):
    from nlptasks.testing import run_cli

    out = runs / "onnx"
    code, _, err = run_cli("export", str(cls_run), "--onnx", str(out), "--check-rows", "0")
    if code != 0 and "onnxruntime" in err:
        pytest.skip("onnxruntime is not installed")
    assert code == 0, err
    return out


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "random":
        path.write_bytes(os.urandom(len(data)))
    elif how == "bit-flipped":  # one bit in the middle: the file still loads, and predicts otherwise
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :])
    elif how == "missing":
        path.unlink()
    else:
        raise AssertionError(how)


DAMAGES = ["truncated", "empty", "random", "bit-flipped", "missing"]


def clean_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith(("nlptasks: ", "note: "))]
    assert lines and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def copy(run: Path, tmp_path: Path, name: str = "copy") -> Path:
    target = tmp_path / name
    shutil.copytree(run, target)
    return target


def test_a_run_and_an_export_record_their_files(cls_run, onnx_run):
    for folder, weights in ((cls_run, "model.safetensors"), (onnx_run, "model.onnx")):
        lines = (folder / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
        sums = dict(reversed(line.split("  ", 1)) for line in lines)
        assert {weights, "config.json", "nlptasks.json", "tokenizer.json"} <= set(sums), sums
        assert not {"README.md", "COMPLETE", "metrics.json", "SHA256SUMS"} & set(sums)
        for rel, digest in sums.items():  # what `sha256sum -c SHA256SUMS` checks
            assert hashlib.sha256((folder / rel).read_bytes()).hexdigest() == digest, rel
        # the documents may be edited: the folder still loads
    card = cls_run / "README.md"
    card.write_text(card.read_text(encoding="utf-8") + "\nA note.\n", encoding="utf-8")
    import nlptasks

    assert nlptasks.load(cls_run)(["好"])[0]["label"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_run_is_named_by_infer_eval_and_load(cli, cls_run, tmp_path, how):
    run = copy(cls_run, tmp_path)
    damage(run / "model.safetensors", how)
    word = "missing" if how == "missing" else "damaged"
    fragments = (f"{run / 'model.safetensors'}: {word}", "nlptasks run")
    code, _, err = cli("infer", "--model", run, "好")
    clean_error(code, err, *fragments)
    code, _, err = cli("eval", run, "--data", TEST_CSV, "-o", tmp_path / "eval")
    clean_error(code, err, *fragments)
    assert not (tmp_path / "eval").exists()
    code, _, err = cli("export", run, "--onnx", tmp_path / "onnx", "--check-rows", "0")
    clean_error(code, err, *fragments)
    import nlptasks
    from nlptasks.errors import NlptasksError

    with pytest.raises(NlptasksError, match=word) as info:
        nlptasks.load(run)
    assert "model.safetensors" in str(info.value)


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_export_is_named_by_infer_eval_load_and_serve(cli, onnx_run, tmp_path, how):
    export = copy(onnx_run, tmp_path)
    damage(export / "model.onnx", how)
    word = "missing" if how == "missing" else "damaged"
    fragments = (f"{export / 'model.onnx'}: {word}", "nlptasks export", "--onnx")
    code, _, err = cli("infer", "--model", export, "好")
    clean_error(code, err, *fragments)
    code, _, err = cli("eval", export, "--data", TEST_CSV, "-o", tmp_path / "eval")
    clean_error(code, err, *fragments)
    import nlptasks
    from nlptasks.errors import NlptasksError

    with pytest.raises(NlptasksError, match=f"model.onnx: {word}"):
        nlptasks.load(export)
    from nlptasks.serve.models import load_models

    with pytest.raises(NlptasksError, match=f"model.onnx: {word}"):
        load_models([export])


def test_a_changed_manifest_or_tokenizer_is_named(cli, cls_run, tmp_path):
    run = copy(cls_run, tmp_path)
    (run / "tokenizer.json").write_text("{}", encoding="utf-8")
    manifest = run / "nlptasks.json"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('"task"', '"task" ', 1), encoding="utf-8")
    code, _, err = cli("infer", "--model", run, "好")
    clean_error(
        code, err, "2 files are missing, damaged or unrecorded", "tokenizer.json: damaged", "nlptasks.json: damaged"
    )


@pytest.mark.parametrize("cut", ["the-model-line", "empty", "header-only-weights"])
def test_a_file_the_checksums_do_not_name_is_refused(cli, onnx_run, tmp_path, cut):
    """A SHA256SUMS with the model's line removed, or emptied, would check nothing of what loads: a
    bit-flipped model.onnx loaded with exit 0.  A file loading may read that the list does not name
    is refused, as a damaged one is; an added weights file too."""
    export = copy(onnx_run, tmp_path)
    sums = export / "SHA256SUMS"
    lines = sums.read_text(encoding="utf-8").splitlines(keepends=True)
    if cut == "the-model-line":
        sums.write_text("".join(line for line in lines if not line.endswith("  model.onnx\n")), encoding="utf-8")
        damage(export / "model.onnx", "bit-flipped")
        unrecorded = export / "model.onnx"
    elif cut == "empty":
        sums.write_text("", encoding="utf-8")
        unrecorded = export / "nlptasks.json"
    else:
        unrecorded = export / "extra.safetensors"
        unrecorded.write_bytes(b"\0" * 16)
    fragments = (f"{unrecorded}: not in SHA256SUMS", "not loaded")
    code, _, err = cli("infer", "--model", export, "好")
    clean_error(code, err, *fragments)
    code, _, err = cli("eval", export, "--data", TEST_CSV, "-o", tmp_path / "eval")
    clean_error(code, err, *fragments)
    import nlptasks
    from nlptasks.errors import NlptasksError

    with pytest.raises(NlptasksError, match="not in SHA256SUMS"):
        nlptasks.load(export)


def test_a_run_made_before_checksums_still_loads(cli, cls_run, onnx_run, tmp_path):
    """No SHA256SUMS: loads as before; a model file that cannot be read is still named."""
    import nlptasks

    for source, weights in ((cls_run, "model.safetensors"), (onnx_run, "model.onnx")):
        old = copy(source, tmp_path, f"old-{source.name}")
        (old / "SHA256SUMS").unlink()
        expected = nlptasks.load(source, precision="fp32")(["好", "差"])  # not a bf16 the source measured faster
        assert nlptasks.load(old, precision="fp32")(["好", "差"]) == expected
        code, out, err = cli("infer", "--model", old, "好")
        assert code == 0 and "SHA256SUMS" not in err, err
        for how in ("truncated", "empty", "random", "missing"):
            damaged = copy(old, tmp_path, f"{how}-{source.name}")
            damage(damaged / weights, how)
            code, _, err = cli("infer", "--model", damaged, "好")
            named = f"no {weights}" if how == "missing" and weights == "model.onnx" else "cannot load the model"
            clean_error(code, err, str(damaged), weights, named)
            code, _, err = cli("eval", damaged, "--data", TEST_CSV, "-o", tmp_path / f"eval-{how}")
            clean_error(code, err, str(damaged), weights, named)


def test_verification_is_cached_within_a_process(cls_run, tmp_path):
    from nlptasks.engine.io import checksums

    run = copy(cls_run, tmp_path)
    checksums.verify(run, "again")
    hashed = []
    original = checksums.hashlib.sha256

    def counting(*args):
        hashed.append(1)
        return original(*args)

    checksums.hashlib.sha256 = counting
    try:
        checksums.verify(run, "again")
        assert not hashed  # unchanged files: no second hashing
        damage(run / "model.safetensors", "bit-flipped")  # a new mtime: hashed again, and caught
        with pytest.raises(Exception, match="damaged"):
            checksums.verify(run, "again")
        assert hashed
    finally:
        checksums.hashlib.sha256 = original
