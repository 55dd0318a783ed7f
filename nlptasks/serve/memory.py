"""Giving freed memory back to the system between batches.

A server's batches come in every shape (batch size x longest input), and torch's CPU tensors are
malloc'ed: with glibc, the freed blocks of differently sized buffers stay in the process's heaps
(one per thread that allocated), so the resident memory of ``nlptasks serve`` crept up batch
after batch (600 -> 788 MiB in 9 minutes at 32 clients, docs/benchmarks.md) without any object
being kept.  :func:`release_freed_memory` asks glibc to return the free pages (``malloc_trim``);
the batcher calls it after a batch, at most every :data:`EVERY_S` seconds, on the model's worker
thread.  Elsewhere (another C library) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from typing import Any

__all__ = ["EVERY_S", "Trimmer", "release_freed_memory"]

EVERY_S = 2.0
"""Seconds between two trims at the most."""

_LIBC: Any = None


def release_freed_memory() -> bool:
    """``malloc_trim(0)``: free pages of every heap back to the system; whether it could be called."""
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            _LIBC = ctypes.CDLL(name) if name else False
        except OSError:
            _LIBC = False
    trim = getattr(_LIBC, "malloc_trim", None) if _LIBC else None
    if trim is None:
        return False
    trim(0)
    return True


class Trimmer:
    """Calls :func:`release_freed_memory` when at least ``every_s`` seconds passed since its last call."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s, self.last = every_s, time.monotonic()

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            release_freed_memory()
