"""How a run's or an evaluation's figures were computed: threads, precision, backend, device.

A figure depends on more than the weights and the data: the number of threads changes the order of
the sums inside a matrix product (a run's test EM moved from 0.050 to 0.075 between 1 and 2 threads
on a windowed QA plugin), the precision changes their rounding, the backend and the device change
both.  ``metrics.json`` of a run and of an ``nlptasks eval`` records them as ``computed``; the card
says them, and ``nlptasks compare`` flags figures computed differently."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["COMPUTED_KEYS", "computed_with", "computed_text", "differences"]

COMPUTED_KEYS = ("threads", "precision", "backend", "device", "processes")
"""What ``computed`` holds; two figures are computed alike when these are equal."""


def computed_with(trainer: Any, backend: str = "torch") -> dict[str, Any]:
    """How ``trainer`` computes its evaluation: torch's intra-op threads in this process, the precision
    (fp32, or the bf16/fp16 autocast the Trainer applies), ``backend`` (the loaded weights' runner),
    the device and the number of processes (a ``--nproc`` run's ranks)."""
    import torch

    args = trainer.args
    return {
        "threads": torch.get_num_threads(),
        "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
        "backend": backend,
        "device": str(args.device),
        "processes": int(os.environ.get("WORLD_SIZE", "1") or 1),
    }


def computed_text(computed: dict[str, Any] | None) -> str:
    """``2 threads, fp32, torch on cpu`` (``-`` for a record from before this field)."""
    if not computed:
        return "-"
    threads = computed.get("threads")
    processes = computed.get("processes") or 1
    text = f"{threads} thread{'s' if threads != 1 else ''}, {computed.get('precision')}, {computed.get('backend')}"
    text += f" on {computed.get('device')}"
    return text + (f", {processes} processes" if processes > 1 else "")


def differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """What differs between two ``computed`` records (``threads 1 vs 2``); nothing where either is
    missing (a record from before the field: unknown, not different)."""
    if not a or not b:
        return []
    defaults = {"processes": 1}  # a record before the key: one process
    pairs = [(k, a.get(k, defaults.get(k)), b.get(k, defaults.get(k))) for k in COMPUTED_KEYS]
    return [f"{k} {x} vs {y}" for k, x, y in pairs if x != y]
