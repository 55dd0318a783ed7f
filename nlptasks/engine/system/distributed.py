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

from nlptasks.errors import NlptasksError

__all__ = [
    "LAUNCH_OPTIONS",
    "backend",
    "barrier",
    "is_main",
    "launcher_args",
    "on_main",
    "rank",
    "torchrun_command",
    "world_size",
]

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


LAUNCH_OPTIONS = ("--nproc", "--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-id")
"""``nlptasks run`` options that choose the launch; the launched command runs without them."""


def launcher_args(
    nproc: int, nnodes: int = 1, endpoint: str | None = None, node_rank: int | None = None, rdzv_id: str = "nlptasks"
) -> list[str]:
    """torchrun's options for ``nproc`` processes on each of ``nnodes`` machines.

    One machine: ``--standalone``.  Several: every machine runs the same command with the same
    ``endpoint`` (``HOST:PORT`` that all of them reach); with ``node_rank`` the static rendezvous
    (machine ``node_rank`` 0 is at ``endpoint`` and holds global rank 0), without it torchrun's
    c10d rendezvous (ranks in order of arrival; ``rdzv_id`` names the job).
    """
    if nnodes < 1:
        raise NlptasksError(f"--nnodes: {nnodes} machines; give 1 or more")
    if nnodes == 1:
        if endpoint is not None or node_rank is not None:
            raise NlptasksError("--rdzv-endpoint and --node-rank are for several machines: add --nnodes N (N > 1)")
        return ["--standalone", f"--nproc_per_node={nproc}"]
    if not endpoint:
        raise NlptasksError(
            f"--nnodes {nnodes}: give --rdzv-endpoint HOST:PORT, an address every machine reaches",
            hint="On each machine: nlptasks run RECIPE --nproc N --nnodes M --rdzv-endpoint HOST:29400 "
            "(docs/optimize.md#several-machines)",
        )
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise NlptasksError(f"--rdzv-endpoint {endpoint!r}: give HOST:PORT, e.g. node0.cluster:29400")
    common = [f"--nnodes={nnodes}", f"--nproc_per_node={nproc}"]
    if node_rank is None:
        return [*common, "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", f"--rdzv_id={rdzv_id}"]
    if not 0 <= node_rank < nnodes:
        raise NlptasksError(f"--node-rank {node_rank}: give 0 to {nnodes - 1} (one per machine)")
    return [
        *common,
        "--rdzv_backend=static",
        f"--node_rank={node_rank}",
        f"--master_addr={host}",
        f"--master_port={port}",
    ]


def torchrun_command(nproc: int, argv: Sequence[str], launcher: Sequence[str] | None = None) -> list[str]:
    """``python -m torch.distributed.run <launcher> -m nlptasks <argv>``, with the launch options
    (:data:`LAUNCH_OPTIONS`) and their values taken out of ``argv``; ``launcher`` defaults to
    ``--standalone --nproc_per_node N``."""
    rest: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in LAUNCH_OPTIONS:
            skip = True
            continue
        if item.startswith(tuple(f"{o}=" for o in LAUNCH_OPTIONS)):
            continue
        rest.append(item)
    return [sys.executable, "-m", "torch.distributed.run", *(launcher or launcher_args(nproc)), "-m", "nlptasks", *rest]
