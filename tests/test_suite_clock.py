"""The suite's own machinery (tests/suite_clock.py): an ``alone`` test waits for the others' tests
to end and holds the rest back while it runs."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from suite_clock import _held


def _hold(path: str, exclusive: bool, seconds: float, ready) -> None:  # noqa: ANN001
    with _held(Path(path), exclusive=exclusive):
        ready.set()
        time.sleep(seconds)


def _waited(tmp_path: Path, first: bool, then: bool) -> float:
    """Seconds a lock (``then``: exclusive?) waits while another process holds one (``first``) for 1 s."""
    lock = tmp_path / "machine"
    ready = multiprocessing.get_context("fork").Event()
    holder = multiprocessing.get_context("fork").Process(target=_hold, args=(str(lock), first, 1.0, ready))
    holder.start()
    assert ready.wait(30)
    started = time.monotonic()
    with _held(lock, exclusive=then):
        waited = time.monotonic() - started
    holder.join(30)
    return waited


def test_an_alone_test_waits_for_a_running_test_and_holds_the_next_back(tmp_path):
    assert _waited(tmp_path, first=False, then=True) > 0.8  # alone after another test: waits for it
    assert _waited(tmp_path, first=True, then=False) > 0.8  # a test after an alone one: waits for it
    assert _waited(tmp_path, first=False, then=False) < 0.5  # two ordinary tests: side by side
