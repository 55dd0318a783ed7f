"""``nlptasks run --nproc N [--nnodes M ...]``: the same command again under torchrun, one process
per device (or CPU process with gloo), on one machine or several; and which process this is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from nlptasks.engine.system.distributed import is_main, launcher_args, torchrun_command
from nlptasks.engine.system.processes import die_with_parent
from nlptasks.errors import NlptasksError

__all__ = ["end_with_parent", "is_main", "launch"]


def launch(
    nproc: int,
    argv: list[str],
    nnodes: int = 1,
    endpoint: str | None = None,
    node_rank: int | None = None,
    rdzv_id: str = "nlptasks",
) -> int:
    """Start ``nlptasks run`` (``argv`` without ``--nproc``) under torchrun with ``nproc`` processes
    per machine; returns torchrun's exit status."""
    if nproc < 1:
        raise NlptasksError(f"--nproc: {nproc} processes; give 1 or more")
    if "WORLD_SIZE" in os.environ:
        raise NlptasksError("--nproc: already inside a distributed launcher (WORLD_SIZE is set); drop --nproc")
    gpus = _visible_gpus()
    if 0 < gpus < nproc:  # NCCL would refuse at start-up: "Duplicate GPU detected"
        raise NlptasksError(
            f"--nproc {nproc}: this machine shows {gpus} CUDA GPU(s), and each process needs its own "
            "(NCCL refuses two processes on one GPU)",
            hint=f"Use --nproc {gpus}, or hide the GPUs to train {nproc} CPU processes with gloo: "
            f"CUDA_VISIBLE_DEVICES= nlptasks run ... --nproc {nproc}",
        )
    launcher = launcher_args(nproc, nnodes, endpoint, node_rank, rdzv_id)
    command = torchrun_command(nproc, argv, launcher)
    print("launch: " + " ".join(command[1:]), file=sys.stderr)
    # torchrun ends (SIGTERM: it stops its workers) when this process is killed, even with SIGKILL
    status = subprocess.call(command, preexec_fn=_torchrun_dies_with_us)
    if status != 0 and nnodes > 1:
        print(
            f"error: torchrun ended with exit status {status}: a process failed, or another machine "
            "left the run (its processes end with it); once every machine is ready, run the same "
            "command on each with --resume to continue from the run's last checkpoint "
            "(output.checkpoint_steps; docs/optimize.md#several-machines)",
            file=sys.stderr,
        )
    return status


def _visible_gpus() -> int:
    """CUDA GPUs this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def end_with_parent() -> bool:
    """Have this process get SIGTERM when the process that started it ends, even by ``kill -9``
    (``prctl(PR_SET_PDEATHSIG)``; ``False`` where Linux's call is not there).  ``nlptasks serve
    --workers N``'s workers call it: without it they answered on the port, with the old model,
    after their supervisor was killed, and a new ``serve`` there found the address in use."""
    return die_with_parent(signal.SIGTERM)


def _torchrun_dies_with_us() -> None:
    die_with_parent(signal.SIGTERM)
