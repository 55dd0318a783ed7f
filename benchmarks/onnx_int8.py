"""int8 ONNX exports, per token vs static vs dynamic: accuracy, labels against fp32, batched vs one-at-a-time answers, speed.

One trained cls run (MiniLM-L6 fine-tuned on SST-2 with ``recipes/sst2-minilm.toml``), exported
with ``nlptasks export --onnx`` as fp32, as ``--quantize int8`` (each token's activations quantized
with its own scale, SmoothQuant divisors calibrated on the run's training rows), as
``--quantize int8-dynamic`` (onnxruntime's dynamic quantization: activation scales per batch) and
as ``--quantize int8-static`` (static QDQ quantization, activation scales calibrated on the run's
training rows) with each calibration method and row count asked for.  Each export's predictor
(``nlptasks.load(EXPORT, batch_size=B, threads=1)``) predicts the test file at batch 1 and batch
32: test accuracy, labels that differ from the fp32 export's (the figure that decides whether an
export may answer for its run), labels that differ between the two batch sizes, the largest score
gap, and rows per CPU second at each batch size (one thread, model load excluded; CPU time, not
wall time, because the machine may be shared: wall figures are in the JSON).

    python benchmarks/onnx_int8.py --model runs/cls/<run> --json onnx-int8.json --docs   # table into docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import _docs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "sst2" / "test.csv"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="a trained cls run folder")
    p.add_argument("--data", type=Path, default=DATA, help="csv with text,label (default: SST-2 test)")
    p.add_argument(
        "--static",
        nargs="*",
        default=["MinMax:128"],
        help="int8-static variants METHOD:ROWS (default: MinMax:128; e.g. Percentile:128 MinMax:256)",
    )
    p.add_argument("--torch", action="store_true", help="also the torch fp32 run")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    _docs.add_arguments(p)
    args = p.parse_args()
    info = _docs.start(__file__, sys.argv[1:])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    from nlptasks.inference.onnx_export import export_onnx

    with args.data.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    texts, gold = [r["text"] for r in rows], [r["label"] for r in rows]
    work = Path(tempfile.mkdtemp(prefix="onnx-int8-"))
    variants: dict[str, Path] = {}
    exports: dict[str, dict] = {}
    for name, quantize, extra in [
        ("fp32", "none", {}),
        ("int8 (per token, smoothed)", "int8", {}),
        ("int8-dynamic", "int8-dynamic", {}),
        *[
            (
                f"int8-static {v}",
                "int8-static",
                {"calibration_method": v.split(":")[0], "calibration_rows": int(v.split(":")[1])},
            )
            for v in args.static
        ],
    ]:
        out = work / "".join(c if c.isalnum() else "-" for c in name)
        started = time.perf_counter()
        manifest = export_onnx(args.model, out, quantize=quantize, **extra)
        exports[name] = {
            "seconds": round(time.perf_counter() - started, 1),
            "bytes": (out / "model.onnx").stat().st_size,
            "quantization": manifest["onnx"]["quantization"],
        }
        variants[name] = out
        print(f"exported {name}: {exports[name]['seconds']} s", file=sys.stderr)
    if args.torch:
        variants["torch fp32"] = args.model
    figures = {}
    labels_of: dict[str, list] = {}  # the fp32 export's labels (the first variant), compared with each
    for name, folder in variants.items():
        import nlptasks

        results, rate, wall = {}, {}, {}
        for batch in (1, 32):
            kw = {"backend": "torch", "precision": "fp32"} if name == "torch fp32" else {"threads": 1}
            predictor = nlptasks.load(folder, batch_size=batch, **kw)
            predictor(texts[:8])  # warm-up
            started, cpu = time.perf_counter(), time.process_time()
            results[batch] = predictor(texts)
            rate[batch] = len(texts) / (time.process_time() - cpu)
            wall[batch] = len(texts) / (time.perf_counter() - started)
        labels = {b: [r["label"] for r in results[b]] for b in results}
        figures[name] = {
            "accuracy_b32": sum(a == g for a, g in zip(labels[32], gold, strict=True)) / len(gold),
            "accuracy_b1": sum(a == g for a, g in zip(labels[1], gold, strict=True)) / len(gold),
            "labels_differ_b32_vs_b1": sum(a != b for a, b in zip(labels[1], labels[32], strict=True)),
            "labels_differ_from_fp32": sum(
                a != b for a, b in zip(labels[32], labels_of.setdefault("fp32", labels[32]), strict=True)
            ),
            "max_score_gap_b32_vs_b1": max(
                abs(a["score"] - b["score"]) for a, b in zip(results[1], results[32], strict=True)
            ),
            "rows_per_s_b1": round(rate[1], 1),
            "rows_per_s_b32": round(rate[32], 1),
            "rows_per_wall_s_b1": round(wall[1], 1),
            "rows_per_wall_s_b32": round(wall[32], 1),
            **exports.get(name, {}),
        }
        print(name, json.dumps(figures[name]), file=sys.stderr)
    lines = [
        "| model | test accuracy (b32 / b1) | labels differ from ONNX fp32 | labels differ b32 vs b1 "
        "| largest score gap b32 vs b1 | rows/CPU-s b1 | rows/CPU-s b32 | model.onnx |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        size = f"{f['bytes'] / 1e6:.1f} MB" if "bytes" in f else "—"
        lines.append(
            f"| {name} | {f['accuracy_b32']:.4f} / {f['accuracy_b1']:.4f} | {f['labels_differ_from_fp32']} of "
            f"{len(texts):,} | {f['labels_differ_b32_vs_b1']} | {f['max_score_gap_b32_vs_b1']:.1e} "
            f"| {f['rows_per_s_b1']:.0f} | {f['rows_per_s_b32']:.0f} | {size} |"
        )
    _docs.publish(args, _docs.block_name(__file__), info, "\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"data": str(args.data), "figures": figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
