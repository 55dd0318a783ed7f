"""Who runs a trial, and what happens to a trial whose process died.

Each trial records its owner as user attributes the moment it starts (``host``, ``pid``,
``started``: the Unix time the process began the trial), and Optuna's heartbeat thread writes a
heartbeat every :data:`HEARTBEAT_INTERVAL` seconds.  Before it counts the study's trials, every
``nlptasks tune`` calls :func:`fail_dead`, which marks ``FAIL`` (state ``interrupted``: not
counted) each ``RUNNING`` trial whose owner is dead:

- its host is this machine and its process is gone (or the pid now belongs to a process started
  after the trial: the pid was reused);
- its heartbeat is older than :data:`HEARTBEAT_GRACE` seconds (any machine);
- it has no owner yet (the process died between Optuna creating the trial and the trial
  recording its owner): at once on a study whose processes all take the study folder's lock
  (SQLite: the lock is held from creating a trial until its owner is recorded), else once it
  started more than :data:`HEARTBEAT_GRACE` seconds ago without a heartbeat.

The values a dead trial had drawn are queued again (:func:`requeue`, at most :data:`MAX_RETRY`
times per trial), so the next trial runs them rather than drawing new ones.

``NLPTASKS_KILL_AT=PHASE`` makes the process SIGKILL itself at a named phase (:func:`kill_point`):
the tests' way to kill a study exactly at a trial's start, mid-training, or while its results are
written.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from nlptasks.engine.system.processes import process_alive

__all__ = [
    "HEARTBEAT_GRACE",
    "HEARTBEAT_INTERVAL",
    "HOST",
    "KILL_ENV",
    "MAX_RETRY",
    "PHASES",
    "fail_dead",
    "kill_point",
    "record_owner",
    "requeue",
]

HOST = socket.gethostname()
"""This machine's name, recorded on each trial with the process id."""
HEARTBEAT_INTERVAL = 20
"""Seconds between a running trial's heartbeats in the storage."""
HEARTBEAT_GRACE = 90
"""Seconds without a heartbeat after which another process fails the trial (and queues its values again)."""
MAX_RETRY = 3
"""How many times the values of a killed trial are queued again."""
KILL_ENV = "NLPTASKS_KILL_AT"
PHASES = ("trial-start", "train-step", "trial-results", "study-results")
"""The phases :func:`kill_point` knows: a trial just created (no owner recorded yet), the second
optimizer step of a trial's training, a trial's run saved but its value not yet stored, and the
study's results being written."""


def kill_point(phase: str) -> None:
    """SIGKILL this process when ``NLPTASKS_KILL_AT`` names ``phase`` (a test hook; see :data:`PHASES`)."""
    assert phase in PHASES, phase
    if os.environ.get(KILL_ENV) == phase:
        os.kill(os.getpid(), signal.SIGKILL)


def record_owner(trial: Any) -> None:
    """Record this process as the owner of ``trial``: ``host``, ``pid``, ``started``."""
    trial.set_user_attr("host", HOST)
    trial.set_user_attr("pid", os.getpid())
    trial.set_user_attr("started", round(time.time(), 3))


def _process_start(pid: int) -> float | None:
    """The Unix time process ``pid`` started (``None``: unknown)."""
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001 - no psutil, no such process, no permission: unknown
        return None


def _owner_alive(pid: int, started: Any) -> bool:
    """Whether process ``pid`` of this machine lives and is the one that started the trial at ``started``."""
    if not process_alive(pid):
        return False
    born = _process_start(pid)
    return not (isinstance(started, (int, float)) and born is not None and born > started + 1)


def _why_dead(trial: Any, locked: bool, now: float) -> str | None:
    """Why ``trial`` (``RUNNING``) has a dead owner, or ``None`` when it may be alive."""
    attrs = trial.user_attrs
    pid = attrs.get("pid")
    if attrs.get("host") == HOST and isinstance(pid, int):
        return None if _owner_alive(pid, attrs.get("started")) else f"its process {pid} is gone"
    if "pid" in attrs:
        return None  # another machine's: its heartbeat tells (fail_stale_trials)
    if locked:
        return "its process died before recording itself"
    start = trial.datetime_start.timestamp() if trial.datetime_start is not None else now
    if now - start > HEARTBEAT_GRACE:
        return f"no owner and no heartbeat for {HEARTBEAT_GRACE} s"
    return None


def requeue(study: Any, trial: Any) -> None:
    """Queue the values of a dead ``trial`` again (without its owner's attributes), unless they
    were already retried :data:`MAX_RETRY` times."""
    import optuna

    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if len(history) > MAX_RETRY:
        return
    study.add_trial(
        optuna.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            system_attrs={"failed_trial": history[0], "retry_history": history},
        )
    )


def fail_dead(study: Any, storage: Any, locked: bool, log: Callable[[str], None]) -> None:
    """Mark ``FAIL`` every ``RUNNING`` trial of ``study`` whose owner is dead (see the module) and
    queue its values again.  ``locked``: every process on this study holds the study folder's
    lock from creating a trial until it records its owner, and this one holds it now."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        before = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        optuna.storages.fail_stale_trials(study)  # silent heartbeats; requeue is the storage's callback
    now = time.time()
    study_id = storage.get_study_id_from_name(study.study_name)
    for t in study.get_trials(deepcopy=False):
        if t.number in before and t.state != optuna.trial.TrialState.RUNNING:
            if t.state == optuna.trial.TrialState.FAIL and "error" not in t.user_attrs:
                log(
                    f"trial {t.number}: no heartbeat for {HEARTBEAT_GRACE} s: marked interrupted, its values queued again"
                )
            continue
        why = _why_dead(t, locked, now) if t.state == optuna.trial.TrialState.RUNNING else None
        if why is None:
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            if not storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process failed it first
        log(f"trial {t.number}: {why}: marked interrupted (not counted), its values queued again")
        requeue(study, storage.get_trial(trial_id))
