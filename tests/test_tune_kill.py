"""``nlptasks tune`` killed at any moment comes back: a real SIGKILL (``NLPTASKS_KILL_AT``) at a
trial's start, mid-training, while a trial's result or the study's results are written; the next
``tune`` marks the dead trial interrupted, runs its values again and finishes the study with
exactly N complete trials of distinct values.  Also: the owner rules of
:func:`nlptasks.tune.owners.fail_dead` on a bare storage, and a resumed sampler drawing new values."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("optuna")
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")

from test_tune import env, recipe, sets, study, trial_states  # noqa: E402

from conftest import run_process  # noqa: E402
from nlptasks.testing import plugin_host, run_cli  # noqa: E402
from nlptasks.tune import owners  # noqa: E402


@pytest.fixture(scope="module")
def host():
    return plugin_host(builtins=True)


def trials_of(folder):
    import optuna

    return optuna.load_study(study_name="study", storage=f"sqlite:///{folder / 'study.db'}").get_trials()


@pytest.mark.parametrize("phase", ["trial-start", "train-step", "trial-results"])
def test_a_study_killed_in_a_trial_finishes_with_n_distinct_complete_trials(tmp_path, phase):
    path = recipe(tmp_path, trials=2)
    command = [sys.executable, "-m", "nlptasks", "-q", "tune", str(path), *sets(tmp_path)]
    killed = run_process(command, env={**env(), owners.KILL_ENV: phase})
    assert killed.returncode == -9, killed.stderr
    folder = study(tmp_path)
    assert trial_states(folder) == {0: "running"}  # what the kill leaves

    done = run_process(command, env=env())
    assert done.returncode == 0, done.stderr
    assert "marked interrupted (not counted)" in done.stderr
    states = trial_states(folder)
    assert states[0] == "interrupted"
    complete = [t for t in trials_of(folder) if t.state.name == "COMPLETE"]
    assert len(complete) == 2 and sum(s in ("complete", "pruned", "failed") for s in states.values()) == 2
    values = [t.params["train.learning_rate"] for t in complete]
    assert len(set(values)) == 2, values  # nothing drawn twice
    dead = trials_of(folder)[0]
    if phase == "trial-start":
        assert dead.params == {} and "pid" not in dead.user_attrs  # died before recording its owner
    else:
        assert dead.params in [t.params for t in complete]  # its values were run again, once
    assert (folder / "results.md").exists()


def test_a_study_killed_while_writing_its_results_writes_them_on_the_next_run(tmp_path):
    path = recipe(tmp_path, trials=2)
    command = [sys.executable, "-m", "nlptasks", "-q", "tune", str(path), *sets(tmp_path)]
    killed = run_process(command, env={**env(), owners.KILL_ENV: "study-results"})
    assert killed.returncode == -9, killed.stderr
    folder = study(tmp_path)
    assert trial_states(folder) == {0: "complete", 1: "complete"} and not (folder / "results.md").exists()
    done = run_process(command, env=env())
    assert done.returncode == 0, done.stderr
    assert "2/2 trials finished" in done.stderr and "trial 2" not in done.stderr
    assert trial_states(folder) == {0: "complete", 1: "complete"} and (folder / "results.md").exists()


def test_a_resumed_study_draws_new_values(tmp_path, host):
    path = recipe(tmp_path, trials=1, extra="")
    for n in (1, 2, 3):  # three processes, one new trial each
        code, out, err = run_cli("tune", path, *sets(tmp_path), "--trials", str(n), host=host)
        assert code == 0, err
    values = [t.params["train.learning_rate"] for t in trials_of(study(tmp_path))]
    assert len(values) == 3 and len(set(values)) == 3, values


# -- the owner rules, on a bare storage (no training) ------------------------------------------------


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A study on a heartbeat storage with a 1 s grace period, and what ``fail_dead`` logs."""
    import warnings

    import optuna

    monkeypatch.setattr(owners, "HEARTBEAT_GRACE", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(
            f"sqlite:///{tmp_path / 'bare.db'}",
            heartbeat_interval=1,
            grace_period=1,
            heartbeat_stale_trial_callback=owners.requeue,
        )
    s = optuna.create_study(storage=storage, study_name="study")
    lines: list[str] = []
    return s, storage, lines


def running_trial(s, storage, **attrs):
    trial = s.ask()
    trial.suggest_float("x", 0.0, 1.0)
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return trial


def test_a_trial_of_a_gone_or_reused_pid_on_this_machine_is_failed_and_requeued(bare):
    s, storage, lines = bare
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = running_trial(s, storage, host=owners.HOST, pid=gone.pid, started=time.time())
    reused = running_trial(s, storage, host=owners.HOST, pid=os.getpid(), started=1.0)  # our pid, born later
    alive = running_trial(s, storage, host=owners.HOST, pid=os.getpid(), started=time.time())
    owners.fail_dead(s, storage, False, lines.append)
    states = {t.number: t.state.name for t in s.get_trials()}
    assert states[dead.number] == states[reused.number] == "FAIL" and states[alive.number] == "RUNNING"
    waiting = [t for t in s.get_trials() if t.state.name == "WAITING"]
    assert sorted(t.params["x"] for t in waiting) == sorted([dead.params["x"], reused.params["x"]])
    assert all("pid" not in t.user_attrs for t in waiting)  # the owner is not copied to the retry
    assert f"trial {dead.number}: its process {gone.pid} is gone" in "\n".join(lines)


def test_a_trial_of_another_machine_fails_when_its_heartbeat_stops(bare):
    s, storage, lines = bare
    trial = running_trial(s, storage, host="elsewhere", pid=1, started=time.time())
    storage.record_heartbeat(trial._trial_id)
    owners.fail_dead(s, storage, False, lines.append)
    assert s.get_trials()[0].state.name == "RUNNING"  # a fresh heartbeat: alive
    time.sleep(2.2)
    owners.fail_dead(s, storage, False, lines.append)
    assert s.get_trials()[0].state.name == "FAIL" and "no heartbeat" in "\n".join(lines)
    assert [t.params for t in s.get_trials() if t.state.name == "WAITING"] == [trial.params]


def test_a_trial_without_owner_fails_at_once_under_the_lock_else_after_the_grace(bare):
    s, storage, lines = bare
    running_trial(s, storage)
    owners.fail_dead(s, storage, False, lines.append)
    assert s.get_trials()[0].state.name == "RUNNING"  # just created: its process may be recording itself
    owners.fail_dead(s, storage, True, lines.append)
    assert s.get_trials()[0].state.name == "FAIL" and "died before recording itself" in lines[-1]
    later = running_trial(s, storage)
    time.sleep(1.5)
    owners.fail_dead(s, storage, False, lines.append)
    assert s.get_trials()[later.number].state.name == "FAIL" and "no owner and no heartbeat" in lines[-1]


def test_a_trial_is_requeued_at_most_max_retry_times(bare):
    s, storage, lines = bare
    trial = running_trial(s, storage)
    frozen = storage.get_trial(trial._trial_id)
    frozen.system_attrs["retry_history"] = list(range(owners.MAX_RETRY))
    owners.requeue(s, frozen)
    assert not [t for t in s.get_trials() if t.state.name == "WAITING"]
