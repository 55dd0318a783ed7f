"""Processes of this machine: whether one still runs."""

from __future__ import annotations

import os

__all__ = ["process_alive"]


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
