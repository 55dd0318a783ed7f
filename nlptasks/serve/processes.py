"""``nlptasks serve --workers auto`` (the default): how many server processes, and why.

Several processes behind one port (``--workers N``) serve a small model faster on a CPU than one
process with all the cores: each batch is computed on one core while the other processes parse
requests and compute theirs, where one process leaves cores idle between batches (its HTTP
handling, tokenizing and gathering a batch are serial).  Measured 2026-11-27 on 2 cores (AMD
EPYC), SST-2 MiniLM answering with its int8 export, 8 clients: one process with 2 threads used
1.1 cores and answered 212 requests/s, 2 processes with 1 thread each 267 (1.26x).  Each process
holds its own copy of the models, so the rule is narrow:

* ``auto`` starts one process per core (at most :data:`MOST_WORKERS`, each with the cores divided
  among them as intra-op threads) only where every served run answers with an **ONNX export**
  (an encoder, a few hundred MB per process, nothing that generates) on a machine with 2 or more
  cores, and ``--threads`` is not given;
* otherwise one process: torch weights (a large model's copies would not fit, and one-thread
  torch is slower one request at a time), a model that chats (concurrent chats are batched within
  one process), a plugin's backend, one core, or ``--threads`` given (the user sized the process).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["MOST_WORKERS", "auto_workers", "usable_cores"]

MOST_WORKERS = 4
"""The most processes ``--workers auto`` starts (beyond, the cores are shared as threads)."""


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def auto_workers(run_dirs: Sequence[Path], options: Any, threads: int | None) -> tuple[int, str]:
    """``(processes, why)`` for ``--workers auto`` (see the module's rule)."""
    from nlptasks.inference.loading import prepare_load

    cores = usable_cores()
    if threads is not None:
        return 1, "--threads was given"
    if cores < 2:
        return 1, "one CPU core"
    backends = {prepare_load(Path(r), options).options.backend for r in run_dirs}
    if backends != {"onnx"}:
        return 1, f"a run answers with the {'/'.join(sorted(b for b in backends if b != 'onnx'))} backend"
    workers = min(cores, MOST_WORKERS)
    return workers, f"every run answers with an ONNX export; {cores} CPU cores"
