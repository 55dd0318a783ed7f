"""Shared fixtures: paths to our recipes and the shared real data, the in-process CLI, tiny runs
(``runs``: a folder per test module; :func:`tiny_run`: train a recipe on a tiny model through the
CLI), subprocesses guarded against hangs instead of timed (:func:`run_process`), and what the
server tests share.

Plugins load in isolation: the process's plugin host holds nlptasks' own task plugins and
nothing else installed (``nlptasks.testing.plugin_host``), and subprocesses load only those
(``NLPTASKS_PLUGINS``).  Tests about entry-point discovery build their own ``Host()``.

``--slow`` adds the real-data quality checks (minutes each), marked ``@pytest.mark.slow``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
SHARED_DATA = ROOT.parent / "shared" / "data"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One pytest-xdist worker per core (pyproject.toml's addopts): each worker's torch, and the runs it
    # starts in subprocesses, on its share of the cores.  Left at torch's default (every core), 2 workers
    # on 2 cores oversubscribe them and OpenMP's waiting threads spin: test_dpo, test_ner and
    # test_tutorial_choice took 591 s on 2 workers at 2 threads, 158 s at 1 (2026-12-04).
    _share = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(_share))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["NLPTASKS_PLUGINS"] = "cls,ner,pair,sft,mlm,dpo"  # subprocesses: our built-ins, nothing else installed
os.environ.pop("NLPTASKS_BLOCK_PLUGINS", None)

pytest_plugins = ["suite_clock"]  # the suite's wall time and slowest tests at the end; @pytest.mark.alone


def pytest_addoption(parser):
    parser.addoption(
        "--slow", action="store_true", default=False, help="also run the slow real-data quality checks (marked slow)"
    )
    parser.addoption(
        "--figures",
        action="store_true",
        default=False,
        help="also run the figures tier: every measured shipped recipe against docs/figures.toml (marked figures)",
    )


def pytest_configure(config):
    from nlptasks.host import reset_host
    from nlptasks.testing import plugin_host

    reset_host(plugin_host(builtins=True))


def pytest_collection_modifyitems(config, items):
    tiers = {
        "slow": "slow real-data check: run with --slow",
        "figures": "a shipped recipe's figure: run with --figures",
    }
    for marker, reason in tiers.items():
        if config.getoption(f"--{marker}"):
            continue
        for item in items:
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


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


# -- tiny runs -------------------------------------------------------------------------------------

TINY_DECODER = [
    "model.scratch.layers=1",
    "model.scratch.hidden=64",
    "model.scratch.heads=2",
    "model.scratch.intermediate=128",
    "model.scratch.min_frequency=1",
]
"""What :data:`TINY` is for the encoders, for a decoder (``sft``): seconds-long runs."""


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> Path:
    """A fresh folder for the runs of one test module (their ``output.dir``): a run trained into it
    once serves every test of the module that asks for it."""
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_") + "-runs")


def set_args(*items: str) -> list[str]:
    """``--set`` arguments: ``set_args("a=1", "b=2")`` → ``["--set", "a=1", "--set", "b=2"]``."""
    return [arg for item in items for arg in ("--set", item)]


class RunFolder(type(Path())):
    """The folder of a run :func:`tiny_run` trained (a :class:`~pathlib.Path`), with what ``nlptasks
    run`` printed (``out``, ``err``) and its command line (``argv``: ``cli(*run.argv, "--resume")``)."""

    out: str = ""
    err: str = ""
    argv: tuple[str, ...] = ()


def tiny_run(
    folder: Path,
    recipe: str | Path,
    name: str,
    *sets: str,
    tiny: Sequence[str] = TINY,
    epochs: int | None = 1,
    exit_code: int = 0,
) -> RunFolder:
    """Train ``recipe`` in-process through the CLI, ``nlptasks run RECIPE --no-progress`` with the
    overrides ``tiny``, ``train.epochs=EPOCHS`` (none when ``None``), ``output.dir=FOLDER``,
    ``output.run_name=NAME``, then ``sets`` (a later key wins); assert it exited ``exit_code`` (the
    run's stderr in the message) and return its folder, ``FOLDER/<task>/NAME``.

    ``recipe``: a file name under recipes/ (``"cls.toml"``, ``"hub/x.toml"``) or an absolute path;
    the task is the recipe's (or a ``task=`` override's).  ``tiny=()`` keeps the recipe's model.
    The run uses the process's plugin host; a test with a host of its own uses
    :func:`nlptasks.testing.run_recipe`.
    """
    from nlptasks.recipe import parse_override, read_toml
    from nlptasks.testing import run_cli

    path = RECIPES / recipe
    overrides = [
        *tiny,
        *([f"train.epochs={epochs}"] if epochs is not None else []),
        f"output.dir={folder}",
        f"output.run_name={name}",
        *sets,
    ]
    task = read_toml(path).get("task")
    for item in overrides:
        key, value = parse_override(item)
        if key == ["task"]:
            task = value
    argv = ("run", str(path), "--no-progress", *set_args(*overrides))
    code, out, err = run_cli(*argv)
    assert code == exit_code, f"nlptasks {' '.join(argv)}: exit {code}, not {exit_code}\n{err}"
    run_dir = RunFolder(Path(folder) / str(task) / name)
    if exit_code == 0:
        assert (run_dir / "COMPLETE").exists(), f"{run_dir} is no complete run\n{err}"
    run_dir.out, run_dir.err, run_dir.argv = out, err, argv
    return run_dir


# Inputs of the parity and export tests (tests/test_parity.py, tests/test_onnx.py).
# Lengths from 1 character to past max_length (64 tokens in TINY), in no particular order.
CLS_TEXTS = [
    "好",
    "房间又脏又吵，太差了，再也不来了！！",
    "服务很好",
    "差" * 3,
    "这家酒店服务很好，房间也干净，早餐丰富" * 5,
    "前台态度一般",
    "位置不错但是隔音很差，晚上睡不好，早餐也很一般",
    "还行",
    "不推荐",
]
PAIRS = [
    ("酒店早餐几点开始", "早饭几点开始供应"),
    ("怎么开发票", "我想退掉火车票"),
    ("好", "好的"),
    ("可以带宠物入住吗？我家有一只小狗", "宠物能不能带进房间"),
    ("退房时间是几点", "几点之前要退房，可以延迟退房吗，要加钱吗"),
    ("密码忘了", "怎么重置密码"),
]


def crashed_copy(run_dir: Path, step: int, crashed: Path) -> Path:
    """The folder ``kill -9`` leaves right after checkpoint-STEP of the complete run ``run_dir``: a copy
    at ``crashed`` without the run's final files and without the later checkpoints (for ``--resume``)."""
    import shutil

    shutil.copytree(run_dir, crashed)
    for name in ("COMPLETE", "model.safetensors", "metrics.json", "nlptasks.json", "README.md", "log_history.json"):
        (crashed / name).unlink()
    for checkpoint in (crashed / "checkpoints").glob("checkpoint-*"):
        if int(checkpoint.name.split("-")[1]) > step:
            shutil.rmtree(checkpoint)
    return crashed


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
        fields = stat[stat.rindex(")") + 2 :].split()
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

    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE if input is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )
    out, err = communicate(proc, input, idle_s)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def nlptasks(*args, cwd: Path | None = None, input: str | None = None, **kwargs):
    """``nlptasks ARGS...`` in a fresh process, like a user (``python -m nlptasks``): a
    :class:`subprocess.CompletedProcess` from :func:`run_process` (it waits as long as it works)."""
    import sys

    return run_process([sys.executable, "-m", "nlptasks", *map(str, args)], input=input, cwd=cwd, **kwargs)


def wait_for(ready, proc, idle_s: float = IDLE_S, poll_s: float = 0.1) -> None:
    """Wait until ``ready()`` is true while ``proc`` works toward it: fails (and ends the process)
    when the process exits first, or when it (with its children) has used no CPU for ``idle_s``
    seconds, never because it is slow."""
    import time

    def output() -> str:
        out, err = proc.communicate()
        return "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (out or "", err or ""))[
            -3000:
        ]

    watch = Path("/proc/self/stat").exists()  # without /proc: a plain, generous wait
    last, still_since = (_cpu_ticks(proc.pid) if watch else 0), time.monotonic()
    checked = still_since
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"{' '.join(map(str, proc.args))} exited {proc.returncode} first\n{output()}")
        now = time.monotonic()
        if watch and now - checked >= 1:  # the CPU use of the process tree, once a second
            checked, ticks = now, _cpu_ticks(proc.pid)
            if ticks != last:
                last, still_since = ticks, now
        if now - still_since > (idle_s if watch else idle_s * 6):
            _kill_tree(proc)
            raise AssertionError(f"{' '.join(map(str, proc.args))}: no CPU used for {idle_s:g} s: hung\n{output()}")
        time.sleep(poll_s)


# -- the server tests (tests/test_serve_openai.py, tests/test_serve_page.py) -----------------------

QUESTION = "湖畔酒店几点可以入住？"
_SMALL = ["data.max_train_rows=64", "data.max_eval_rows=8"]
SERVED = {
    "sft": [*_SMALL, "peft.method=none", "options.generation_eval.rows=2"],
    "cls": _SMALL,
    "ner": _SMALL,
    "pair": _SMALL,
    "pair-bi": [*_SMALL, "options.mode=bi"],
}
"""The overrides of each task's tiny quickstart run that the server tests serve."""


@pytest.fixture(scope="session")
def served_run(tmp_path_factory):
    """``served_run(task)``: a tiny 1-epoch run of ``recipes/<task>.toml`` (:data:`SERVED`), trained
    once per test session (seconds) for whichever server test asks first."""
    folder = tmp_path_factory.mktemp("serve-runs")
    done: dict[str, Path] = {}

    def get(task: str) -> Path:
        if task not in done:
            done[task] = tiny_run(folder, f"{task.split('-')[0]}.toml", task, *SERVED[task])
        return done[task]

    return get


def serve_state(runs: dict[str, Path], api_key: str | None = None):
    """The :class:`ServerState` ``nlptasks serve RUN... --name NAME...`` builds for these runs."""
    from nlptasks.serve.models import load_models
    from nlptasks.serve.state import ServerState, ServeSettings

    return ServerState(models=load_models(list(runs.values()), list(runs)), settings=ServeSettings(api_key=api_key))


def build_app(state):
    """The server's app (``nlptasks serve`` runs it): predict, models, the OpenAI routes, the page."""
    from nlptasks.serve.app import create_app

    return create_app(state)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (for a server or a rendezvous a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(app):
    """``app`` on uvicorn in a thread, on a free port of 127.0.0.1; yields the base URL."""
    import socket
    import threading
    import time

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + IDLE_S  # a hang guard: starting takes well under a second
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


GOEMOTIONS = ROOT / "data" / "goemotions"
"""The multi-label data committed with the project (a GoEmotions subset, data/goemotions/README.md)."""


def multilabel_recipe(folder: Path, train_rows: int = 600) -> Path:
    """A multi-label ``cls`` recipe on the GoEmotions subset with a tiny from-scratch byte-level BPE
    model (seconds per epoch; :data:`TINY` shrinks it further), written into ``folder``."""
    path = Path(folder) / "multilabel.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"""task = "cls"
seed = 42

[data]
train = "{(GOEMOTIONS / "train.jsonl").as_posix()}"
validation = "{(GOEMOTIONS / "validation.jsonl").as_posix()}"
test = "{(GOEMOTIONS / "test.jsonl").as_posix()}"
max_train_rows = {train_rows}
max_eval_rows = 300

[model]
max_length = 64

[model.scratch]
architecture = "bert"
tokenizer = "bpe"
vocab_size = 2000
min_frequency = 2
layers = 1
hidden = 64
heads = 2
intermediate = 128

[train]
epochs = 2
batch_size = 32
learning_rate = 2e-3
eval_strategy = "epoch"
keep_best = true

[options]
label_column = "labels"
multi_label = true
""",
        encoding="utf-8",
    )
    return path
