"""ONNX Runtime on the other encoder tasks: CoNLL-2003 NER and MRPC sentence pairs (issue 19).

For each task: fine-tune MiniLM-L6 with its shipped recipe (``recipes/conll2003-minilm.toml``,
``recipes/mrpc-minilm.toml``) on ``--train-rows`` rows, export it with ``nlptasks export --onnx``
in fp32 and int8 (timed; file sizes), then for each of torch fp32, ONNX fp32 and ONNX int8 in the
same process and threads:

* ``nlptasks eval`` on the whole test file: the task's metrics (entity F1 for NER, accuracy and F1
  for MRPC) and the change against torch in points;
* the predictor over the test file's inputs in batches of 32 (``nlptasks infer --file``'s path,
  model load excluded): sentences (pairs) per second and the speed-up over torch, and how many
  predictions differ from torch's (entities as (type, start, end); pair labels).

    python benchmarks/onnx_tasks.py --threads 2 --docs
    python benchmarks/onnx_tasks.py --train-rows 64 --test-rows 200 --docs --docs-file /tmp/b.md   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import setup  # noqa: E402

TASKS = {
    "conll2003": {
        "recipe": "conll2003-minilm.toml",
        "test": DATA / "conll2003" / "test.jsonl",
        "metrics": ("f1", "precision", "recall"),
        "unit": "sentences",
    },
    "mrpc": {
        "recipe": "mrpc-minilm.toml",
        "test": DATA / "mrpc" / "test.csv",
        "metrics": ("accuracy", "f1"),
        "unit": "pairs",
    },
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=["conll2003", "mrpc"])
    p.add_argument("--train-rows", type=int, default=2000, help="training rows per task (default: 2000)")
    p.add_argument("--test-rows", type=int, default=0, help="score only the first N test rows (default: all)")
    p.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS", "1")),
        help="torch and onnxruntime threads (default: $OMP_NUM_THREADS or 1)",
    )
    _docs.add_arguments(p)
    p.add_argument("--json", type=Path, help="write the figures to this file")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    info = _docs.start(__file__)
    model, work = setup(None, None, "onnx-tasks-")  # offline environment, MiniLM, a new work folder

    import torch

    torch.set_num_threads(args.threads)
    figures = {"command": info.command, "threads": args.threads, "train_rows": args.train_rows, "tasks": {}}
    for name in args.tasks:
        figures["tasks"][name] = measure_task(name, model, work, args)
    _docs.publish(args, _docs.block_name(__file__), info, render(figures), intro(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


def measure_task(name: str, model: str, work: Path, args: argparse.Namespace) -> dict:
    import nlptasks
    from nlptasks.inference.onnx_export import export_onnx
    from nlptasks.inference.streaming import iter_file
    from nlptasks.pipeline.evaluate import evaluate_run

    task = TASKS[name]
    test = task["test"]
    if args.test_rows:
        test = work / f"{name}-test{test.suffix}"
        with task["test"].open(encoding="utf-8") as src, test.open("w", encoding="utf-8") as dst:
            for i, line in enumerate(src):
                if i > args.test_rows:  # the csv header plus N rows (jsonl: N + 1 rows, also fine)
                    break
                dst.write(line)
    run_dir = train(work, name, task["recipe"], model, args.train_rows)
    folders = {"torch fp32": run_dir}
    exports = {}
    for kind in ("fp32", "int8"):
        out = work / f"{name}-onnx-{kind}"
        start = time.perf_counter()
        export_onnx(run_dir, out, quantize="none" if kind == "fp32" else "int8")
        exports[kind] = {"seconds": round(time.perf_counter() - start, 1), "bytes": (out / "model.onnx").stat().st_size}
        folders[f"ONNX {kind}"] = out
    inputs = list(iter_file(test))
    rows: dict = {}
    reference = None
    for label, folder in folders.items():
        (result,) = evaluate_run(folder, [test], output=work / f"{name}-eval-{label.replace(' ', '-')}")
        predictor = nlptasks.load(folder)
        predictor.batch_size = 32
        predictor(inputs[:32])  # warm-up
        start = time.perf_counter()
        predictions = predictor(inputs)
        seconds = time.perf_counter() - start
        keys = [_key(p) for p in predictions]
        if reference is None:
            reference = keys
        rows[label] = {
            "metrics": {m: result.metrics.get(m) for m in task["metrics"]},
            "per_second": len(inputs) / seconds,
            "differ": sum(a != b for a, b in zip(keys, reference, strict=True)),
        }
        del predictor
    return {
        "inputs": len(inputs),
        "unit": task["unit"],
        "rows": rows,
        "exports": exports,
        "test": str(test),
        "recipe": task["recipe"],
    }


def _key(prediction: dict) -> object:
    """What must agree between backends: the entities' (type, start, end), else the label."""
    if "entities" in prediction:
        return [(e["type"], e["start"], e["end"]) for e in prediction["entities"]]
    return prediction.get("label")


def train(work: Path, name: str, recipe: str, model: str, rows: int) -> Path:
    cmd = [sys.executable, "-m", "nlptasks", "-q", "run", str(ROOT / "recipes" / recipe), "--no-progress"]
    for s in (
        f"model.name_or_path={json.dumps(model)}",
        f"data.max_train_rows={rows}",
        f"output.dir={work}",
        f"output.run_name={name}",
    ):
        cmd += ["--set", s]
    print(f"training: {' '.join(cmd[2:])}", file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    (run_dir,) = work.glob(f"*/{name}")
    return run_dir


def intro(f: dict) -> str:
    return (
        f"{f['threads']} thread(s) for torch and onnxruntime; MiniLM-L6 fine-tuned on {f['train_rows']:,} "
        "training rows of each task with its shipped recipe; `nlptasks eval` on the whole test file for "
        "the metrics; the predictor (batches of 32, model load excluded) for the speed."
    )


def render(f: dict) -> str:
    lines = []
    for name, t in f["tasks"].items():
        metrics = list(next(iter(t["rows"].values()))["metrics"])
        torch_row = t["rows"]["torch fp32"]
        lines += [
            f"**{name}** ({t['inputs']:,} test {t['unit']}, `recipes/{t['recipe']}`)",
            "",
            "| model | " + " | ".join(f"test {m}" for m in metrics) + f" | {t['unit']}/s | vs torch | "
            "predictions differing from torch | model.onnx | export (s) |",
            "|---|" + "---:|" * (len(metrics) + 5),
        ]
        for label, r in t["rows"].items():
            cells = []
            for m in metrics:
                v, base = r["metrics"].get(m), torch_row["metrics"].get(m)
                change = (
                    f" ({100 * (v - base):+.2f} pts)"
                    if label != "torch fp32" and v is not None and base is not None
                    else ""
                )
                cells.append(f"{v:.4f}{change}" if v is not None else "-")
            kind = label.split()[1] if label.startswith("ONNX") else None
            size = f"{t['exports'][kind]['bytes'] / 2**20:.1f} MiB" if kind else "—"
            secs = str(t["exports"][kind]["seconds"]) if kind else "—"
            lines.append(
                f"| {label} | " + " | ".join(cells) + f" | {r['per_second']:.0f} | "
                f"{r['per_second'] / torch_row['per_second']:.2f}x | {r['differ']} | {size} | {secs} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip()


if __name__ == "__main__":
    sys.exit(main())
