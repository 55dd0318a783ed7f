"""``nlptasks tune`` on a real PostgreSQL server: Debian's ``initdb`` and ``pg_ctl`` start one in a
temporary folder (as the ``postgres`` user when the tests run as root: ``initdb`` refuses root),
listening on a free loopback port.  Two ``nlptasks tune`` processes in separate working folders
(so no shared lock file: what two machines have) share one study through its URL; each trial runs
once and both end with the whole study; one killed mid-trial is recovered by the other; another
machine's trial whose heartbeat stops is failed and queued again; a plain ``postgresql://`` URL
finds the installed driver.

Skips, saying why, only where PostgreSQL's server programs or a Python driver are not installed
(``.ci/run`` installs both: ``apt-get install postgresql``, ``pip install -e ".[tune-postgres]"``).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("optuna")
pytestmark = [
    pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning"),
    pytest.mark.filterwarnings("ignore:Argument ``heartbeat_interval``"),
    pytest.mark.filterwarnings("ignore:Argument ``grace_period``"),
]

from test_tune import env, recipe, sets  # noqa: E402

from conftest import free_port  # noqa: E402
from nlptasks.tune import owners  # noqa: E402
from nlptasks.tune.results import state_of  # noqa: E402
from nlptasks.tune.study import database_url  # noqa: E402


def _server_bin() -> Path | None:
    """The folder of PostgreSQL's ``initdb`` and ``pg_ctl`` (Debian keeps them off PATH)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


@pytest.fixture(scope="module")
def postgres():
    """A running PostgreSQL server: a function ``database(name) -> URL`` that creates a database."""
    bin_dir = _server_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed: apt-get install postgresql")
    if not any(importlib.util.find_spec(m) for m in ("psycopg", "psycopg2")):
        pytest.skip('no PostgreSQL driver for Python: pip install -e ".[tune-postgres]"')
    prefix: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="nlptasks-pg-"))
    if os.geteuid() == 0:  # initdb refuses root: run the server as Debian's postgres user
        try:
            shutil.chown(folder, user="postgres")
        except LookupError:
            shutil.rmtree(folder)
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()
    subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync"],
        check=True,
        capture_output=True,
    )
    options = f"-h 127.0.0.1 -p {port} -k {folder} -F"  # loopback only, socket in the folder, no fsync
    subprocess.run(
        [
            *prefix,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(folder / "server.log"),
            "-w",
            "-o",
            options,
            "start",
        ],
        check=True,
        capture_output=True,
    )
    import sqlalchemy

    admin = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def database(name: str) -> str:
        engine = sqlalchemy.create_engine(database_url(admin), isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return f"postgresql://postgres@127.0.0.1:{port}/{name}"

    try:
        yield database
    finally:
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(folder, ignore_errors=True)


def _trials(url: str, name: str = "shared"):
    import optuna

    return optuna.load_study(study_name=name, storage=database_url(url)).get_trials()


def _worker(folder: Path, url: str, trials: int, kill_at: str | None = None) -> subprocess.Popen[str]:
    """``nlptasks tune`` in its own working folder (its own runs, no lock shared with the other)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = recipe(folder, trials=trials)
    command = [sys.executable, "-m", "nlptasks", "-q", "tune", str(path), *sets(folder)]
    command += ["--storage", url, "--study", "shared"]
    extra = {owners.KILL_ENV: kill_at} if kill_at else {}
    return subprocess.Popen(
        command, cwd=folder, env={**env(), **extra}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _ran_in(folder: Path) -> set[str]:
    trials = folder / "runs" / "cls" / "tune-shared" / "trials"
    return {p.name for p in trials.iterdir() if (p / "COMPLETE").exists()} if trials.exists() else set()


def test_two_workers_in_separate_folders_share_one_postgres_study(tmp_path, postgres):
    url = postgres("two_workers")
    procs = [_worker(tmp_path / name, url, trials=4) for name in ("a", "b")]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    trials = _trials(url)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 4, [(t.number, t.state.name) for t in trials]
    assert len({tuple(sorted(t.params.items())) for t in complete}) == 4  # nothing drawn twice
    a, b = _ran_in(tmp_path / "a"), _ran_in(tmp_path / "b")
    assert not a & b and len(a | b) == 4, (a, b)  # each trial ran once, in one of the two folders
    assert {f"trial-{t.number}" for t in complete} == a | b
    assert len({t.user_attrs["pid"] for t in complete}) == 2  # both processes ran trials
    # a worker whose last trials run elsewhere waits for them: both end with the whole study
    tables = [(tmp_path / n / "runs" / "cls" / "tune-shared" / "results.md").read_text() for n in ("a", "b")]
    assert all("4 finished trials" in t and "still running" not in t for t in tables), tables


def test_a_worker_killed_beside_a_running_one_is_recovered_while_the_study_runs(tmp_path, postgres):
    url = postgres("concurrent_kill")
    killed = _worker(tmp_path / "a", url, trials=3, kill_at="train-step")
    other = _worker(tmp_path / "b", url, trials=3)
    _, err_killed = killed.communicate(timeout=600)
    _, err = other.communicate(timeout=600)
    assert killed.returncode == -9 and other.returncode == 0, err_killed + err
    trials = _trials(url)
    dead = [t for t in trials if state_of(t) == "interrupted"]
    assert len(dead) == 1 and "marked interrupted" in err
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 3 and dead[0].params in [t.params for t in complete]
    assert not [t for t in trials if t.state.name == "RUNNING"]


# -- the owner rules on this storage (no training) ----------------------------------------------


@pytest.fixture
def bare(postgres, request):
    import optuna

    url = postgres(f"bare_{request.node.name.split('[')[0][-40:].lower()}")
    lines: list[str] = []
    storage = optuna.storages.RDBStorage(
        database_url(url), heartbeat_interval=1, grace_period=1, heartbeat_stale_trial_callback=owners.requeue
    )
    return optuna.create_study(storage=storage, study_name="study"), storage, lines


def test_another_machines_trial_fails_when_its_heartbeat_stops(bare):
    s, storage, lines = bare
    trial = s.ask()
    trial.suggest_float("x", 0.0, 1.0)
    for key, value in {"host": "elsewhere", "pid": 1, "started": time.time()}.items():
        trial.set_user_attr(key, value)
    storage.record_heartbeat(trial._trial_id)
    owners.fail_dead(s, storage, False, lines.append)
    assert s.get_trials()[0].state.name == "RUNNING"  # a fresh heartbeat: alive
    time.sleep(2.5)
    owners.fail_dead(s, storage, False, lines.append)
    trials = s.get_trials()
    assert trials[0].state.name == "FAIL" and "no heartbeat" in "\n".join(lines)
    assert trials[1].state.name == "WAITING" and trials[1].params == trials[0].params  # queued again


# -- the URL's driver (no server) ----------------------------------------------------------------


def test_a_plain_postgresql_url_gets_the_installed_driver(monkeypatch):
    import importlib.util

    from nlptasks.errors import NlptasksError

    assert database_url("sqlite:///study.db") == "sqlite:///study.db"
    assert database_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"  # named: kept
    real = importlib.util.find_spec
    for installed, driver in ((("psycopg", "psycopg2"), "psycopg"), (("psycopg2",), "psycopg2")):
        monkeypatch.setattr(importlib.util, "find_spec", lambda m, i=installed: real("os") if m in i else None)
        assert database_url("postgresql://u:p@h:5432/db") == f"postgresql+{driver}://u:p@h:5432/db"
    monkeypatch.setattr(importlib.util, "find_spec", lambda m: None)
    with pytest.raises(NlptasksError) as info:
        database_url("postgres://u@h/db")
    assert "no PostgreSQL driver" in str(info.value) and "nlptasks[tune-postgres]" in info.value.hint
