"""Shared fixtures: paths to our recipes and the shared real data, and a tiny-model CLI runner.

Plugins load in isolation: the process's plugin host holds nlptasks' own task plugins and
nothing else installed (``nlptasks.testing.plugin_host``), and subprocesses load only those
(``NLPTASKS_PLUGINS``).  Tests about entry-point discovery build their own ``Host()``.

``--slow`` adds the real-data quality checks (minutes each), marked ``@pytest.mark.slow``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
SHARED_DATA = ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["NLPTASKS_PLUGINS"] = "cls,ner,pair,sft"  # subprocesses: our built-ins, nothing else installed
os.environ.pop("NLPTASKS_BLOCK_PLUGINS", None)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the slow real-data quality checks (marked slow)")


def pytest_configure(config):
    from nlptasks.host import reset_host
    from nlptasks.testing import plugin_host

    reset_host(plugin_host(builtins=True))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow real-data check: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

# A model small enough that a run takes seconds.
from nlptasks.testing import TINY as _TINY  # noqa: E402

TINY = list(_TINY)


def shared(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"shared data {path} not present")
    return path


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: ``code, out, err = cli("run", ...)``."""
    from nlptasks.cli import main

    def call(*argv: str) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def run_recipe(cli, tmp_path):
    """Train a recipe with the tiny model into ``tmp_path``; return the run directory."""

    def call(recipe: Path | str, *overrides: str, tiny: bool = True) -> Path:
        sets = [*(TINY if tiny else []), f"output.dir={tmp_path / 'runs'}", "output.run_name=t", *overrides]
        argv = ["run", str(recipe), "--no-progress"]
        for s in sets:
            argv += ["--set", s]
        code, out, err = cli(*argv)
        assert code == 0, err
        run_dirs = list((tmp_path / "runs").glob("*/t"))
        assert len(run_dirs) == 1
        return run_dirs[0]

    return call


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))


def write_csv(path: Path, rows: list[tuple[str, str]], header: str = "text,label") -> Path:
    import csv

    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header.split(","))
        writer.writerows(rows)
    return path


# -- subprocesses: a hang is no progress, not a slow machine ---------------------------------------

IDLE_S = 600
"""A child process that uses no CPU for this long (itself and its children) is hung: the limit
that guards against hangs.  A slow run on a busy machine keeps using CPU and is never cut short."""


def _cpu_ticks(pid: int) -> int:
    """CPU time of ``pid`` and its live descendants, in clock ticks (0 once they are gone)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        ticks[int(entry.name)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += ticks.get(current, 0)
        todo += children.get(current, [])
    return total


def _kill_tree(proc) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, AttributeError):
        proc.kill()


def communicate(proc, input: str | None = None, idle_s: float = IDLE_S) -> tuple[str, str]:
    """``proc.communicate()`` that waits as long as the process works: it fails only when the
    process (with its children) has used no CPU for ``idle_s`` seconds."""
    import subprocess
    import time

    if not Path("/proc/self/stat").exists():  # no /proc to watch: a plain, generous wait
        return proc.communicate(input=input, timeout=idle_s * 6)
    last, still_since, first = _cpu_ticks(proc.pid), time.monotonic(), True
    while True:
        try:
            return proc.communicate(input=input if first else None, timeout=5)
        except subprocess.TimeoutExpired:
            first = False
        ticks = _cpu_ticks(proc.pid)
        if ticks != last:
            last, still_since = ticks, time.monotonic()
        elif time.monotonic() - still_since > idle_s:
            _kill_tree(proc)
            out, err = proc.communicate()
            raise AssertionError(f"{' '.join(map(str, proc.args))}: no CPU used for {idle_s:g} s: hung\n{err[-3000:]}")


def run_process(command: list[str], input: str | None = None, idle_s: float = IDLE_S, **kwargs):
    """``subprocess.run(command, capture_output=True, text=True, ...)`` with :func:`communicate`'s
    hang guard instead of a time limit."""
    import subprocess

    proc = subprocess.Popen(command, stdin=subprocess.PIPE if input is not None else None, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs)
    out, err = communicate(proc, input, idle_s)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)
