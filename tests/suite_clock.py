"""What the suite costs, printed at the end of every run, and the tests that need the machine alone.

* **The clock.**  Every run (the default suite, ``--slow``, ``--figures``; one process or pytest-xdist
  workers) ends with its wall time, the sum of its tests' times (setup, call and teardown: a module's
  shared run counts toward the test that trained it) and its ten slowest tests, against the tier's
  budget in docs/reliability.md#the-ci-budget, so creep shows in every CI log.  Over the budget it
  says so; it does not fail the run (a timed test would fail on a busy machine, not on a slow change).
* **alone.**  ``@pytest.mark.alone``: a test whose assertion is about this machine's speed (the CLI's
  start-up time) runs with no other test beside it.  Under pytest-xdist every test holds a shared lock
  on a file of the session and an ``alone`` test an exclusive one, taken through a turnstile so that a
  waiting ``alone`` test is not starved by the other workers' stream of tests.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

BUDGET_S = {"default": 900, "slow": 600, "figures": 900, "slow+figures": 1200}
"""Each tier's wall-time budget on our 2-core machines (docs/reliability.md#the-ci-budget)."""

_started = time.monotonic()
_spent: dict[str, float] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "alone: a test about this machine's speed; runs with no other test beside it (pytest-xdist)"
    )


def pytest_runtest_logreport(report):
    _spent[report.nodeid] = _spent.get(report.nodeid, 0.0) + report.duration


def _tier(config) -> str:
    slow, figures = config.getoption("--slow"), config.getoption("--figures")
    return "slow+figures" if slow and figures else "slow" if slow else "figures" if figures else "default"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):  # an xdist worker: the controller prints
        return
    wall = time.monotonic() - _started
    tier = _tier(config)
    budget = BUDGET_S[tier]
    workers = getattr(config.option, "numprocesses", None) or 1
    write = terminalreporter.write_line
    terminalreporter.section("suite clock")
    write(
        f"{tier} tier: {wall:.0f} s wall ({workers} worker(s)), {sum(_spent.values()):.0f} s in tests; "
        f"budget {budget} s{'' if wall <= budget else f': OVER BUDGET by {wall - budget:.0f} s'}"
    )
    write("ten slowest tests (setup + call + teardown):")
    for nodeid, seconds in sorted(_spent.items(), key=lambda kv: -kv[1])[:10]:
        write(f"  {seconds:7.1f} s  {nodeid}")


# -- alone: one test with the machine to itself -------------------------------------------------------


def _locks(config) -> tuple[Path, Path] | None:
    """The session's lock files, shared by the xdist workers (``None`` outside xdist)."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return None
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"nlptasks-tests-{worker['testrunuid']}"
    folder.mkdir(exist_ok=True)
    return folder / "turnstile", folder / "machine"


@contextlib.contextmanager
def _held(path: Path, exclusive: bool):
    import fcntl

    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    locks = _locks(item.config)
    if locks is None:
        yield
        return
    turnstile, machine = locks
    if item.get_closest_marker("alone"):
        with _held(turnstile, exclusive=True), _held(machine, exclusive=True):
            yield
        return
    with _held(turnstile, exclusive=True):  # passes at once unless an alone test is waiting or running
        pass
    with _held(machine, exclusive=False):
        yield
