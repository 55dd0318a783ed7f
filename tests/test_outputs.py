"""An output never destroys an input, and every write error is an error (docs/reliability.md, class 2).

The commands that write after training (``infer --output``, ``eval -o``, ``export --onnx`` /
``--merge``, ``tune``'s study folder) go through one writing path
(:mod:`nlptasks.engine.io.outputs`): an output that is one of the inputs is refused before anything
is written; files and folders are written atomically (a failure leaves the old output as it was,
and no half-written folder); an OS error is one ``error:`` line naming the path and the reason,
exit code 2, no traceback.

Real failures, not mocks: ``/dev/full`` (ENOSPC on every write), a path under a regular file
(ENOTDIR), ``/proc`` (no new files, even for root), and, where the tests may mount (root), a
64 KiB tmpfs (a full disk) and a read-only tmpfs (EROFS).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, tiny_run

SMALL = ("data.max_train_rows=64", "data.max_eval_rows=8")
TEST_CSV = ROOT / "recipes" / "data" / "cls" / "test.csv"


@pytest.fixture(scope="module")
def cls_run(runs):
    return tiny_run(runs, "cls.toml", "t", *SMALL)


def clean_error(code: int, err: str, *fragments: str) -> str:
    """Exit 2, one ``error:`` line, no traceback, every fragment in the message."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith(("nlptasks: ", "note: "))]
    assert lines and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


@contextlib.contextmanager
def mounted(folder: Path, options: str):
    """A tmpfs at ``folder`` (``size=64k``, ``ro`` ...); skips where the tests may not mount."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def no_leftovers(folder: Path) -> None:
    """No temporary file or folder of the writing path is left in ``folder``."""
    if folder.is_dir():
        assert not [p.name for p in folder.iterdir() if ".tmp-" in p.name], list(folder.iterdir())


# -- an output that is an input is refused, before anything is written ----------------------------

INPUTS = {
    "same.txt": "好\n差\n",
    "same.csv": "text\n好\n差\n",
    "same.jsonl": '{"text": "好"}\n{"text": "差"}\n',
}


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_infer_output_that_is_the_input_is_refused(cli, cls_run, tmp_path, name):
    src = tmp_path / name
    src.write_text(INPUTS[name], encoding="utf-8")
    before = src.read_bytes()
    code, out, err = cli("infer", "--model", cls_run, "--file", src, "--output", src)
    clean_error(code, err, f"--output {src}", "also the input", "--file")
    assert src.read_bytes() == before  # it was emptied to 0 bytes, with exit code 0
    assert "nlptasks: model:" not in err  # refused before the model loads
    # a link to the input is the input too
    link = tmp_path / f"link-{name}"
    link.symlink_to(src)
    code, _, err = cli("infer", "--model", cls_run, "--file", src, "--output", link)
    clean_error(code, err, "also the input")
    hard = tmp_path / f"hard-{name}"
    os.link(src, hard)
    code, _, err = cli("infer", "--model", cls_run, "--file", hard, "--output", src)
    clean_error(code, err, "also the input")
    assert src.read_bytes() == before
    no_leftovers(tmp_path)


def test_infer_candidates_and_stdin_are_inputs_too(cli, cls_run, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("好\n差\n", encoding="utf-8")
    code, _, err = cli("infer", "--model", cls_run, "--file", src, "--candidates", src, "--output", src)
    clean_error(code, err, "also the input")
    with src.open("rb") as stdin:
        proc = subprocess.run(
            [sys.executable, "-m", "nlptasks", "infer", "--model", str(cls_run), "--output", str(src)],
            stdin=stdin,
            capture_output=True,
            text=True,
        )
    clean_error(proc.returncode, proc.stderr, "also the input", "stdin")
    assert src.read_text(encoding="utf-8") == "好\n差\n"


def test_predict_file_refuses_its_input(cls_run, tmp_path):
    import nlptasks
    from nlptasks.errors import NlptasksError

    src = tmp_path / "in.txt"
    src.write_text("好\n", encoding="utf-8")
    predict = nlptasks.load(cls_run)
    with pytest.raises(NlptasksError, match="also the input"):
        nlptasks.predict_file(predict, src, src)
    assert src.read_text(encoding="utf-8") == "好\n"


def test_eval_and_export_outputs_that_hold_the_run_are_refused(cli, cls_run, tmp_path):
    metrics = (cls_run / "metrics.json").read_bytes()
    for target in (cls_run, cls_run.parent):
        code, _, err = cli("eval", cls_run, "--data", TEST_CSV, "-o", target)
        clean_error(code, err, f"--output {target}", "input", str(cls_run))
        code, _, err = cli("export", cls_run, "--onnx", target, "--check-rows", "0")
        clean_error(code, err, f"--onnx {target}", "input")
    assert (cls_run / "metrics.json").read_bytes() == metrics
    data = tmp_path / "data.csv"
    data.write_bytes(TEST_CSV.read_bytes())
    code, _, err = cli("eval", cls_run, "--data", data, "-o", data)
    clean_error(code, err, f"--output {data}", "input")
    assert data.read_bytes() == TEST_CSV.read_bytes()


# -- files and folders in the way ------------------------------------------------------------------


def test_outputs_onto_a_file_or_under_one(cli, cls_run, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me\n", encoding="utf-8")
    cases = [
        (("eval", cls_run, "--data", TEST_CSV, "-o", a_file), ["--output", "a file, not a folder"]),
        (("eval", cls_run, "--data", TEST_CSV, "-o", a_file / "sub"), ["--output", "is a file, not a folder"]),
        (("export", cls_run, "--onnx", a_file), ["--onnx", "a file, not a folder"]),
        (("export", cls_run, "--merge", a_file), ["--merge", "a file, not a folder"]),
        (("export", cls_run, "--onnx", a_file / "x"), ["--onnx", "is a file, not a folder"]),
        (
            ("infer", "--model", cls_run, "--output", a_file / "out.jsonl", "好"),
            ["--output", "is a file, not a folder"],
        ),
        (("infer", "--model", cls_run, "--output", tmp_path, "好"), ["--output", "Is a directory"]),
    ]
    for argv, fragments in cases:
        code, _, err = cli(*argv)
        clean_error(code, err, *fragments)
    assert a_file.read_text(encoding="utf-8") == "keep me\n"
    no_leftovers(tmp_path)


def test_outputs_where_no_file_may_be_created(cli, cls_run, tmp_path):
    """/proc takes no new files, even for root."""
    for argv, flag in (
        (("infer", "--model", cls_run, "--output", "/proc/nlptasks-out", "好"), "--output"),
        (("eval", cls_run, "--data", TEST_CSV, "-o", "/proc/nlptasks-out"), "--output"),
        (("export", cls_run, "--onnx", "/proc/nlptasks-out", "--check-rows", "0"), "--onnx"),
    ):
        code, _, err = cli(*argv)
        clean_error(code, err, f"{flag} /proc/nlptasks-out", "cannot write")


def test_infer_onto_a_full_device(cli, cls_run, tmp_path):
    """/dev/full: every write is ENOSPC (a device is written directly, not renamed over)."""
    code, _, err = cli("infer", "--model", cls_run, "--output", "/dev/full", "好", "差")
    clean_error(code, err, "--output /dev/full", "No space left on device")
    code, out, err = cli("infer", "--model", cls_run, "--output", "/dev/null", "好")
    assert code == 0, err
    assert Path("/dev/null").is_char_device()


def test_infer_on_a_full_disk_keeps_the_old_output(cli, cls_run, tmp_path):
    src = tmp_path / "big.txt"
    src.write_text("这家酒店服务很好，房间也干净\n" * 1500, encoding="utf-8")  # results: ~100 KiB
    with mounted(tmp_path / "small", "size=64k") as disk:
        out = disk / "out.jsonl"
        out.write_text("old results\n", encoding="utf-8")
        code, _, err = cli("infer", "--model", cls_run, "--file", src, "--output", out)
        clean_error(code, err, f"--output {out}", "No space left on device", "disk")
        assert out.read_text(encoding="utf-8") == "old results\n"
        no_leftovers(disk)


def test_infer_error_midway_keeps_the_old_output(cli, cls_run, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "好"}\n' * 9 + '{"body": "x"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    out.write_text("old results\n", encoding="utf-8")
    code, _, err = cli("infer", "--model", cls_run, "--file", src, "--chunk-rows", "4", "--output", out)
    clean_error(code, err, "in.jsonl:10")
    assert out.read_text(encoding="utf-8") == "old results\n"
    no_leftovers(tmp_path)
    code, _, err = cli("infer", "--model", cls_run, "--file", tmp_path / "ok.txt", "--output", out)
    assert code != 0 and out.read_text(encoding="utf-8") == "old results\n"


def test_eval_and_export_on_a_full_or_read_only_disk(cli, cls_run, tmp_path):
    with mounted(tmp_path / "ro", "ro,size=64k") as disk:
        code, _, err = cli("eval", cls_run, "--data", TEST_CSV, "-o", disk / "eval")
        clean_error(code, err, f"--output {disk / 'eval'}", "Read-only file system")
        code, _, err = cli("export", cls_run, "--onnx", disk / "onnx", "--check-rows", "0")
        clean_error(code, err, f"--onnx {disk / 'onnx'}", "Read-only file system")
    with mounted(tmp_path / "full", "size=16k") as disk:
        code, _, err = cli("eval", cls_run, "--data", TEST_CSV, "-o", disk / "eval")
        clean_error(code, err, f"--output {disk / 'eval'}", "disk")
        assert not (disk / "eval").exists()  # no half-written eval folder
        no_leftovers(disk)
        code, _, err = cli("export", cls_run, "--onnx", disk / "onnx", "--check-rows", "0")
        clean_error(code, err, f"--onnx {disk / 'onnx'}", "disk")
        assert not (disk / "onnx").exists()  # no half-written export
        no_leftovers(disk)


def test_eval_writes_its_folder_whole(cli, cls_run, tmp_path):
    out = tmp_path / "eval"
    code, _, err = cli("eval", cls_run, "--data", TEST_CSV, "-o", out)
    assert code == 0, err
    assert {"metrics.json", "report.md", "errors.jsonl"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["rows"] == 200
    code, _, err = cli("eval", cls_run, "--data", TEST_CSV, "-o", out)  # an earlier eval is replaced whole
    assert code == 0, err
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["rows"] == 200
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n", encoding="utf-8")
    code, _, err = cli("eval", cls_run, "--data", TEST_CSV, "-o", other)  # any other folder is not
    clean_error(code, err, "exists and is not empty")
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    no_leftovers(tmp_path)


# -- tune's study folder -----------------------------------------------------------------------------

TUNE = """
[tune]
trials = 1

[tune.space]
"train.learning_rate" = { low = 1e-4, high = 1e-2, log = true }
"""


def test_tune_output_folder_onto_a_file_or_read_only(cli, tmp_path):
    data = ROOT / "recipes" / "data" / "cls"
    text = (ROOT / "recipes" / "cls.toml").read_text(encoding="utf-8").replace('"data/cls/', f'"{data}/')
    recipe = tmp_path / "study.toml"
    recipe.write_text(text.split("\n[tune]")[0] + TUNE, encoding="utf-8")
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me\n", encoding="utf-8")
    code, _, err = cli("tune", recipe, "--set", f"output.dir={a_file}")
    clean_error(code, err, "output.dir", "is a file, not a folder", "--set output.dir=DIR")
    assert a_file.read_text(encoding="utf-8") == "keep me\n"
    code, _, err = cli("tune", recipe, "--set", "output.dir=/proc/nlptasks-out")
    clean_error(code, err, "output.dir", "cannot write")
    with mounted(tmp_path / "ro", "ro,size=64k") as disk:
        code, _, err = cli("tune", recipe, "--set", f"output.dir={disk}")
        clean_error(code, err, "output.dir", "Read-only file system")


# -- the writing path itself ---------------------------------------------------------------------


def test_atomic_file_keeps_the_old_file_on_an_error(tmp_path):
    from nlptasks.engine.io.outputs import atomic_file

    path = tmp_path / "out.txt"
    path.write_text("old\n", encoding="utf-8")
    with pytest.raises(ValueError), atomic_file(path, "--output") as fh:
        fh.write("new, half")
        raise ValueError("stop")
    assert path.read_text(encoding="utf-8") == "old\n"
    with atomic_file(path, "--output") as fh:
        fh.write("new\n")
    assert path.read_text(encoding="utf-8") == "new\n"
    no_leftovers(tmp_path)


# -- a process killed while writing -----------------------------------------------------------------


def _killed_while_writing(command: list[str], out: Path) -> None:
    """Start ``nlptasks COMMAND`` and SIGKILL it as soon as its temporary sibling of ``out`` exists."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "nlptasks", *command], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600  # a hang guard only: the folder appears within seconds of its start
        while not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp-")]:
            assert proc.poll() is None, f"ended before writing (exit {proc.returncode})"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert not out.exists()  # nothing half-written under the name
    assert [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp-")]  # what the kill left


@pytest.mark.parametrize("command", ["export", "eval"])
def test_a_kill_mid_write_leaves_no_output_and_the_next_run_clears_its_leftovers(cli, cls_run, tmp_path, command):
    """kill -9 while `export --onnx` or `eval -o` writes: no folder under the output's name, only the
    temporary sibling; the same command run again writes the whole output and removes what the
    killed one left (its process is gone), so killed attempts do not pile up."""
    pytest.importorskip("onnxruntime")
    out = tmp_path / "out"
    args = ["export", str(cls_run), "--onnx", str(out)] if command == "export" else []
    args = args or ["eval", str(cls_run), "--data", str(TEST_CSV), "-o", str(out)]
    _killed_while_writing(args, out)
    code, _, err = cli(*args)
    assert code == 0, err
    assert (out / ("COMPLETE" if command == "export" else "metrics.json")).exists()
    no_leftovers(tmp_path)
