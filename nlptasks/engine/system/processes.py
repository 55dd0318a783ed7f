"""Processes of this machine: whether one still runs; a process that ends with its parent."""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["die_with_parent", "process_alive"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have Linux send ``sig`` to this process when its parent ends (``prctl(PR_SET_PDEATHSIG)``);
    ``False`` where that is not available.  A launcher's child that its launcher outlives (a
    ``kill -9`` of the command the user started, a machine's job killed) would otherwise train on
    alone, and write into a run folder a later ``--resume`` uses.  Call it in the process that
    should die (in a child between fork and exec, or in the child itself: the parent that counts
    is the one at the call; one already gone ends this process at once)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # the parent ended before the call: what it would have done
        os.kill(os.getpid(), sig)
    return True


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine: ``False`` only when there is none (a process
    of another user, or no way to tell, counts as alive: what it owns is left alone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's process
        return True
    return True
