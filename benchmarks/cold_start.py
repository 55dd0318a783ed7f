"""CLI cold start: wall time of ``nlptasks --help`` and ``nlptasks plugins`` in fresh processes.

Goals: ``--help`` <= 0.3 s, ``plugins`` <= 0.5 s.  Each command runs ``--repeat`` times (default
7) after one untimed run (to warm the file cache); the table gives the median and the fastest.
Timings on a busy machine are noisy: the 1-minute load average is printed with them.

    python benchmarks/cold_start.py --docs        # also writes the table into docs/benchmarks.md
    python benchmarks/cold_start.py --repeat 1 --docs --docs-file /tmp/benchmarks.md   # smoke run, into a copy
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402

COMMANDS = [(["--help"], 0.3), (["plugins"], 0.5)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7, help="timed runs per command (default: 7)")
    _docs.add_arguments(p)
    args = p.parse_args()
    info = _docs.start(__file__)
    rows, ok = [], True
    for argv, goal in COMMANDS:
        cmd = [sys.executable, "-m", "nlptasks", *argv]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        ok = ok and median <= goal
        rows.append(
            f"| `nlptasks {' '.join(argv)}` | {median:.2f} | {min(times):.2f} | ≤ {goal} | "
            f"{'yes' if median <= goal else 'no'} |"
        )
    table = "\n".join(
        [
            "| command | median s | fastest s | goal | met (median) |",
            "|---|---:|---:|---:|---|",
            *rows,
        ]
    )
    _docs.publish(
        args,
        _docs.block_name(__file__),
        info,
        table,
        f"{args.repeat} timed runs per command, each a fresh `python -m nlptasks` process.",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
