"""Distributed runs: ``nlptasks run`` under ``torchrun`` (or ``accelerate launch``), and ``--nproc``.

transformers' Trainer does the data-parallel work itself (a ``DistributedSampler`` per rank,
gradients all-reduced, evaluation predictions gathered); the engine only has to agree on one
run directory and let rank 0 alone write it.  The launchers set ``WORLD_SIZE`` and ``RANK``; on
a machine without CUDA the process group uses gloo: accelerate picks it for CPU processes when
asked for the CPU (``TrainingArguments(use_cpu=True)``, which the engine sets in a distributed
run without CUDA; without it each CPU process would train alone on all the data).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["backend", "barrier", "is_main", "on_main", "rank", "torchrun_command", "world_size"]

T = TypeVar("T")


def world_size() -> int:
    """Number of processes of this run (1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    """This process's global rank (0 without a launcher)."""
    return int(os.environ.get("RANK", "0") or 0)


def is_main() -> bool:
    """Whether this process writes the run directory, logs and prints (rank 0)."""
    return rank() == 0


def _process_group() -> Any:
    """Start the process group the way Trainer will (accelerate's shared state: gloo on CPU, nccl
    on CUDA), so that ranks can talk before the TrainingArguments exist."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def on_main(compute: Callable[[], T]) -> T:
    """``compute()`` on rank 0, its result (or its exception) handed to every rank."""
    if world_size() == 1:
        return compute()
    import torch.distributed as dist

    _process_group()
    box: list[Any] = [None]
    if is_main():
        try:
            box[0] = ("ok", compute())
        except Exception as exc:  # noqa: BLE001 - re-raised on every rank below
            box[0] = ("error", exc)
    dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        raise value
    return value


def barrier() -> None:
    """Wait for every rank (nothing without a launcher)."""
    if world_size() > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()


def backend() -> str | None:
    """The process group's backend (``gloo``, ``nccl``), or ``None`` without one."""
    if world_size() == 1:
        return None
    import torch.distributed as dist

    return dist.get_backend() if dist.is_initialized() else None


def torchrun_command(nproc: int, argv: Sequence[str]) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc_per_node N -m nlptasks <argv>``,
    with ``--nproc`` and its value taken out of ``argv``."""
    rest: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
            continue
        if item == "--nproc":
            skip = True
            continue
        if item.startswith("--nproc="):
            continue
        rest.append(item)
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
        "-m", "nlptasks", *rest,
    ]
