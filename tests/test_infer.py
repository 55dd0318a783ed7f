"""``nlptasks infer`` on big inputs: streaming in chunks (bounded look-ahead), output formats,
``--output``, the progress bar, ``--max-length``, the inference dtype, and a closed stdout."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RECIPES, communicate, tiny_run

TEXTS = ["这家酒店服务很好，房间也干净", "房间又脏又吵，太差了", "好", "早餐一般，位置不错，前台态度也还可以吧", "差"]


@pytest.fixture(scope="module")
def cls_run(runs):
    """A tiny cls run (seconds)."""
    return tiny_run(runs, "cls.toml", "t", "data.max_train_rows=300")


def lines_file(path: Path, n: int) -> Path:
    path.write_text("".join(f"{i} {TEXTS[i % len(TEXTS)]}\n" for i in range(n)), encoding="utf-8")
    return path


def test_ten_thousand_lines_stream_through_in_order(cls_run, cli, tmp_path):
    src = lines_file(tmp_path / "big.txt", 10_000)
    out = tmp_path / "out" / "pred.jsonl"
    code, stdout, err = cli(
        "infer",
        "--model",
        cls_run,
        "--file",
        src,
        "--output",
        out,
        "--chunk-rows",
        "1000",
        "--batch-size",
        "64",
        "--progress",
    )
    assert code == 0, err
    assert stdout == ""  # results went to --output
    results = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(results) == 10_000
    assert [r["text"] for r in results] == [f"{i} {TEXTS[i % len(TEXTS)]}" for i in range(10_000)]
    assert {r["label"] for r in results} <= {"正面", "负面"}
    # the progress bar: rows out of the counted total, and a rate
    assert "10000/10000" in err and "rows/s" in err


def test_streaming_reads_at_most_one_chunk_ahead(cls_run, tmp_path):
    """The file reader is lazy and each chunk's results are written before the next chunk is read:
    the rows read so far never exceed the rows written by more than one chunk."""
    from nlptasks.inference.streaming import iter_rows, stream_predictions
    from nlptasks.pipeline import load_predictor

    src = lines_file(tmp_path / "big.txt", 5_000)
    size = src.stat().st_size
    predictor = load_predictor(cls_run)
    read = written = 0
    seen_positions = []
    with src.open("rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8")

        def counting():
            nonlocal read
            for row in iter_rows(text, "txt"):
                read += 1
                yield row

        def write(results):
            nonlocal written
            assert read - written <= 500, (read, written)
            written += len(results)
            seen_positions.append(raw.tell())

        done = stream_predictions(predictor, counting(), write, chunk_rows=500)
    assert done == written == read == 5_000
    # the bytes read from the file when the first chunk was written: a buffer's worth, not the file
    assert seen_positions[0] < size / 3, (seen_positions[0], size)
    assert seen_positions == sorted(seen_positions)


def test_chunked_output_equals_one_batch(cls_run, cli, tmp_path):
    src = lines_file(tmp_path / "in.txt", 301)
    code, whole, err = cli("infer", "--model", cls_run, "--file", src, "--chunk-rows", "1000")
    assert code == 0, err
    code, chunked, err = cli("infer", "--model", cls_run, "--file", src, "--chunk-rows", "7", "--batch-size", "3")
    assert code == 0, err
    a = [json.loads(line) for line in whole.splitlines()]
    b = [json.loads(line) for line in chunked.splitlines()]
    assert [r["label"] for r in a] == [r["label"] for r in b]
    assert [r["score"] for r in a] == pytest.approx([r["score"] for r in b], abs=1e-4)


def test_csv_output_and_csv_input(cls_run, cli, tmp_path):
    src = tmp_path / "in.csv"
    with src.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text"])
        w.writerows([(i, t) for i, t in enumerate(TEXTS)])
    out = tmp_path / "out.csv"  # the extension picks csv
    code, _, err = cli("infer", "--model", cls_run, "--file", src, "--output", out)
    assert code == 0, err
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["text"] for r in rows] == TEXTS
    assert list(rows[0]) == ["text", "label", "score", "scores"]  # every label's score: a JSON object
    assert float(rows[0]["score"]) == json.loads(rows[0]["scores"])[rows[0]["label"]]
    code, stdout, err = cli("infer", "--model", cls_run, "--format", "csv", *TEXTS[:2])
    assert code == 0, err
    assert stdout.splitlines()[0] == "text,label,score,scores" and len(stdout.splitlines()) == 3


def test_bad_row_in_a_later_chunk_names_the_file_row(cls_run, cli, tmp_path):
    src = tmp_path / "in.jsonl"
    rows = [{"text": t} for t in TEXTS * 3] + [{"body": "x"}]
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    code, _, err = cli("infer", "--model", cls_run, "--file", src, "--chunk-rows", "4")
    assert code == 2
    assert f"{src}:16: no 'text' field; fields: body" in err


def test_unknown_format_lists_the_formats(cls_run, cli):
    code, _, err = cli("infer", "--model", cls_run, "--format", "xml", "好")
    assert code == 2
    assert "--format xml: the 'cls' task does not read or write this format (formats: jsonl, csv)" in err


def test_max_length_cuts_inputs(cls_run, cli):
    long = "服务很好" * 40
    code, out, err = cli("infer", "--model", cls_run, "--max-length", "8", long, long[:6])
    assert code == 0, err
    a, b = (json.loads(line) for line in out.splitlines())
    # 8 tokens = [CLS] + 6 characters + [SEP]: the long text is cut to its first 6 characters
    assert a["score"] == pytest.approx(b["score"], abs=1e-6) and a["label"] == b["label"]
    with pytest.raises(SystemExit) as info:  # argparse refuses it (tests/test_cli_numbers.py)
        cli("infer", "--model", cls_run, "--max-length", "2", "好")
    assert info.value.code == 2


def test_auto_loads_a_run_in_the_precision_it_was_trained_in_where_the_device_has_it(tmp_path):
    """``precision = "auto"`` answers in the run's own training precision (what its metrics and
    `nlptasks eval` used) where the device computes in it, else fp32."""
    import torch

    from nlptasks import LoadOptions
    from nlptasks.inference import precision
    from nlptasks.pipeline import load_predictor

    assert precision.auto_precision("bf16", True) == "bf16"
    assert precision.auto_precision("fp16", True) == "bf16"  # half precision, where bf16 is the device's
    assert precision.auto_precision("fp32", True) == "fp32"  # an fp32 run stays fp32 even where bf16 is fast
    assert precision.auto_precision(None, True) == "fp32"  # a run that recorded none
    assert precision.auto_precision("bf16", False) == "fp32"  # a device without bf16
    run = tiny_run(tmp_path, "cls.toml", "b", "train.precision=bf16", "data.max_train_rows=64")
    manifest = json.loads((run / "nlptasks.json").read_text(encoding="utf-8"))
    assert manifest["precision"] == "bf16"
    # the rule for a run not measured on this machine (a run measures bf16 at its end on a CPU with native
    # bf16; what that record chooses: tests/test_deployments.py)
    (run / "deployments.json").unlink(missing_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    here = torch.cuda.is_bf16_supported() if device == "cuda" else precision.cpu_has_bf16()
    assert precision.inference_precision(LoadOptions(), manifest["precision"]) == (device, "bf16" if here else "fp32")
    expected = torch.bfloat16 if here else torch.float32
    assert load_predictor(run).model.dtype == expected
    assert load_predictor(run, LoadOptions(precision="fp32")).model.dtype == torch.float32


def test_inference_is_fp32_on_cpu_and_bf16_only_where_the_cpu_has_it(cls_run, cli, monkeypatch):
    import torch

    from nlptasks import LoadOptions
    from nlptasks.inference import precision
    from nlptasks.pipeline import load_predictor

    if torch.cuda.is_available():
        pytest.skip("this checks the CPU path")
    assert precision.inference_precision(LoadOptions()) == ("cpu", "fp32")  # auto: fp32 on a CPU, whatever it has
    # the run's own auto, not a bf16 its end-of-run timing chose (that choice: tests/test_deployments.py)
    (cls_run / "deployments.json").unlink(missing_ok=True)
    predictor = load_predictor(cls_run)
    assert predictor.model.dtype == torch.float32
    assert next(predictor.model.parameters()).device.type == "cpu"
    texts = [TEXTS[i % len(TEXTS)] * (1 + i % 3) for i in range(12)]
    code, fp32_out, err = cli("infer", "--model", cls_run, *texts)
    assert code == 0, err

    if precision.cpu_has_bf16():  # AVX-512 BF16 or AMX: bf16 runs on the CPU
        code, bf16_out, err = cli("infer", "--model", cls_run, "--precision", "bf16", *texts)
        assert load_predictor(cls_run, LoadOptions(precision="bf16")).model.dtype == torch.bfloat16
        assert load_predictor(cls_run).model.dtype == torch.float32  # nothing of the bf16 load stayed behind
        assert code == 0, err
        fp32 = [json.loads(line) for line in fp32_out.splitlines()]
        bf16 = [json.loads(line) for line in bf16_out.splitlines()]
        assert [r["text"] for r in bf16] == texts
        assert max(abs(a["score"] - b["score"]) for a, b in zip(fp32, bf16, strict=True)) < 0.02
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)  # a CPU without it
    code, _, err = cli("infer", "--model", cls_run, "--precision", "bf16", "好")
    assert code == 2
    assert "--precision bf16: needs a CUDA GPU with bf16 support or a CPU with native bf16" in err


def test_a_closed_stdout_ends_quietly():
    proc = subprocess.Popen(
        [sys.executable, "-m", "nlptasks", "plugins"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    proc.stdout.close()  # like `nlptasks plugins | head -0`
    _, err = communicate(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_stdin_streams_too(cls_run, cli, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{t}\n" for t in TEXTS * 3)))
    code, out, err = cli("infer", "--model", cls_run, "--chunk-rows", "4")
    assert code == 0, err
    assert [json.loads(line)["text"] for line in out.splitlines()] == TEXTS * 3


def test_json_lines_on_stdin_are_rows_for_every_task(cls_run, cli, monkeypatch):
    """The one input rule: stdin whose first line is a JSON object is read as rows (a predictor
    never parses JSON itself); plain lines stay texts; a row with a list where text belongs is an
    error naming its line, not the list's repr predicted."""
    rows = "".join(json.dumps({"text": t, "id": i}, ensure_ascii=False) + "\n" for i, t in enumerate(TEXTS))
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n" + rows))
    code, out, err = cli("infer", "--model", cls_run)
    assert code == 0, err
    from_rows = [json.loads(line) for line in out.splitlines()]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{t}\n" for t in TEXTS)))
    code, out, err = cli("infer", "--model", cls_run)
    assert from_rows == [json.loads(line) for line in out.splitlines()]
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"text": "好"}\n{"text": ["好"]}\n'))
    code, out, err = cli("infer", "--model", cls_run)
    assert code == 2 and "<stdin>:2: field 'text' holds a list" in err and "['好']" not in out


def test_the_input_rule_for_several_fields():
    from nlptasks.plugin import DataError, input_fields

    fields = ("question", "context")
    assert input_fields(["q", "c", "q2", "c2"], fields) == [
        {"question": "q", "context": "c"},
        {"question": "q2", "context": "c2"},
    ]
    assert input_fields(["q\tc\twith a tab"], fields) == [{"question": "q", "context": "c\twith a tab"}]
    assert input_fields([{"question": "q", "context": "c", "x": 1}], fields) == [{"question": "q", "context": "c"}]
    for bad, message in (
        ([{"question": "q", "context": None}], "row 1: field 'context' is null"),
        ([("q", 5)], "row 1: field 'context' holds a number (5), not a text"),
        (["q", "c", "q2", True], "row 4: the input holds true/false"),
        (["ok", "a\ud800"], "row 2: the input holds a lone surrogate (\\ud800) at character 1"),
        ([{"question": "q"}], "no 'context' field; fields: question"),
        (["a", "b", "c"], "3 text(s) given; each input is 2 texts"),
        (["x\ty", "no tab"], "row 2: expected 2 fields (question, context) separated by a TAB"),
        ([{"question": {"a": 1}, "context": "c"}], "field 'question' holds an object"),
        ([3.5], "row 1: the input holds a number (3.5), not a text"),
    ):
        with pytest.raises(DataError) as info:
            input_fields(bad, fields)
        assert message in str(info.value)


def test_infer_turns_no_value_into_a_text(cls_run, cli, tmp_path):
    """A jsonl row whose text is null, a number or a lone surrogate is an error naming the file's
    row and the field, not the text "None", "5" or a tokenizer's TypeError."""
    src = tmp_path / "in.jsonl"
    for row, message in (
        ('{"text": null}', "field 'text' is null"),
        ('{"text": 5}', "field 'text' holds a number (5), not a text"),
        ('{"text": "\\ud800"}', "field 'text' holds a lone surrogate"),
    ):
        src.write_text('{"text": "好"}\n' + row + "\n", encoding="utf-8")
        code, out, err = cli("infer", "--model", cls_run, "--file", src)
        assert code == 2 and f"{src}:2: {message}" in err, err


def test_a_task_format_streams_chunk_by_chunk(tmp_path, cli):
    """CoNLL in, CoNLL out (ner's own format), read and written in chunks: the same file as in one go."""
    run_dir = tiny_run(tmp_path / "runs", "ner.toml", "t", "data.max_train_rows=200")
    rows = [
        json.loads(line) for line in (RECIPES / "data" / "ner" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    src = tmp_path / "in.conll"
    src.write_text("".join("".join(f"{t}\tO\n" for t in r["tokens"]) + "\n" for r in rows[:25]), encoding="utf-8")
    code, whole, err = cli("infer", "--model", run_dir, "--file", src)
    assert code == 0, err
    out = tmp_path / "out.conll"
    code, _, err = cli("infer", "--model", run_dir, "--file", src, "--chunk-rows", "4", "--output", out)
    assert code == 0, err
    assert out.read_text(encoding="utf-8") == whole
    sentences = [block for block in whole.split("\n\n") if block.strip()]
    assert len(sentences) == 25
    assert [len(s.splitlines()) for s in sentences] == [len(r["tokens"]) for r in rows[:25]]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


HOSTILE_FILES = {
    # name: (bytes, fragments of the one error line)
    "gbk.txt": ("好\n差\n".encode() + "房间很干净".encode("gbk") + b"\n", ["gbk.txt:3", "not UTF-8"]),
    "nul.txt": (b"good\nba\x00d\n", ["nul.txt:2", "NUL byte"]),
    "utf16.txt": ("好\n差\n".encode("utf-16"), ["utf16.txt", "UTF-16"]),
    "gbk.csv": ("text\n好\n".encode() + "房间很干净".encode("gbk") + b"\n", ["gbk.csv:2", "not UTF-8"]),
    "quote.csv": ('text\n"好\n差\n坏\n'.encode(), ["quote.csv:1", "quoted field is not closed"]),
    "nested.jsonl": (
        b'{"text": "a"}\n{"text": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n",
        ["nested.jsonl:2", "nested too deeply"],
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE_FILES))
def test_a_hostile_input_file_is_named_by_its_row(cls_run, cli, tmp_path, name):
    data, fragments = HOSTILE_FILES[name]
    code, out, err = cli("infer", "--model", cls_run, "--file", _write(tmp_path / name, data))
    assert code == 2, (out, err)
    assert "Traceback" not in err and err.count("error: ") == 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def test_hostile_stdin_and_paths(cls_run, cli, tmp_path, monkeypatch):
    """Bytes on stdin are decoded line by line; a folder or a device given as --file is refused
    before it is read (``/dev/zero`` would be read until memory runs out)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("好\n".encode() + "差".encode("gbk") + b"\n")))
    code, _, err = cli("infer", "--model", cls_run)
    assert code == 2 and "<stdin>:2: not UTF-8" in err, err
    code, _, err = cli("infer", "--model", cls_run, "--file", tmp_path)
    assert code == 2 and f"{tmp_path}: is a folder, not a file" in err, err
    code, _, err = cli("infer", "--model", cls_run, "--file", "/dev/zero")
    assert code == 2 and "/dev/zero: is not a regular file" in err, err


def test_settings_out_of_range_are_refused(cls_run, cli):
    """--max-length beyond the model's positions would index past its position table (an
    IndexError deep in torch); a generation setting of nan on a task that does not generate is
    refused by argparse (tests/test_cli_numbers.py), before anything loads."""
    code, _, err = cli("infer", "--model", cls_run, "--max-length", "4096", "好")
    assert code == 2 and "--max-length 4096: the run's model has positions for 512 tokens" in err, err
    assert "--max-length 512 or less" in err
    code, out, err = cli("infer", "--model", cls_run, "--max-length", "512", "好" * 2000)
    assert code == 0 and json.loads(out)["label"], err
    with pytest.raises(SystemExit) as info:
        cli("infer", "--model", cls_run, "--temperature", "nan", "好")
    assert info.value.code == 2
    code, _, err = cli("infer", "--model", cls_run, "--temperature", "0.5", "好")
    assert code == 2 and "does not generate text" in err, err
