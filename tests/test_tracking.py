"""``train.report_to = ["mlflow"]`` against real MLflow tracking stores: its SQLite backend written by
the run itself, and an ``mlflow server`` this module starts (its own SQLite store, artifacts under the
test's folder).  Every run is ``python -m nlptasks run ...`` in a fresh process, as a user runs it;
the store is read back with ``mlflow.MlflowClient``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import RECIPES, TINY, free_port, nlptasks, run_process, set_args, wait_for

SETS = [*TINY, "train.epochs=1", "data.max_train_rows=300", "train.logging_steps=2", 'train.report_to=["mlflow"]']
"""A run of seconds with a training loss every 2 of its 10 optimizer steps, tracked in MLflow."""


def tracked_env(uri: str, experiment: str) -> dict[str, str]:
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": experiment}


def mlflow_run_of(run_dir: Path, uri: str):
    """The MLflow run the run folder's manifest names (``tracking.mlflow``), read from the store at ``uri``."""
    import mlflow

    where = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))["tracking"]["mlflow"]
    assert where["tracking_uri"] == uri
    client = mlflow.MlflowClient(uri)
    return client, client.get_run(where["run_id"])


def artifact_text(client, run_id: str, name: str, folder: Path) -> bytes:
    return Path(client.download_artifacts(run_id, name, str(folder))).read_bytes()


@pytest.fixture
def server(tmp_path_factory):
    """``mlflow server`` on a free port of 127.0.0.1 with a SQLite store, its artifacts and its log
    in a test folder, ended with the test: ``(url, process, folder)``; :func:`ready` waits for it."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = (folder / "server.log").open("w")
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [
            str(mlflow_cli),
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'server.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its uvicorn worker and job runner end with it (a process group)
    )
    try:
        yield f"http://127.0.0.1:{port}", proc, folder
    finally:  # its store is a file in a test folder: nothing to shut down gracefully (SIGTERM takes ~10 s)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def ready(server) -> str:
    url, proc, folder = server

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_for(answers, proc)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{(folder / 'server.log').read_text(errors='replace')[-3000:]}") from None
    return url


def test_validate_names_the_missing_package(tmp_path, cli, monkeypatch):
    """Without the mlflow package (its import blocked in a real process) validate refuses the recipe,
    naming the key, the package and the command that installs it; with it, the recipe is valid."""
    argv = ["validate", str(RECIPES / "cls.toml"), *set_args('train.report_to=["mlflow"]')]
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    blocked = "import sys; sys.modules['mlflow'] = None; from nlptasks.cli import main; sys.exit(main(sys.argv[1:]))"
    refused = run_process([sys.executable, "-c", blocked, *argv], cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert (
        "train.report_to: the mlflow package is not installed: pip install mlflow "
        "(or leave 'mlflow' out of train.report_to)" in refused.stderr
    )
    code, _, err = cli(*argv)
    assert code == 0, err
    started = run_process(
        [
            sys.executable,
            "-c",
            "import sys, nlptasks.cli; print(sorted(m for m in ('mlflow', 'torch') if m in sys.modules))",
        ]
    )
    assert started.stdout.strip() == "[]", "the CLI's start-up imports no tracker (nor torch)"


def test_validate_names_a_server_that_does_not_answer(cli, monkeypatch):
    """An http MLFLOW_TRACKING_URI where nothing listens is refused at once by validate (and by run,
    before anything loads), not after MLflow's four minutes of retries."""
    port = free_port()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://someone:secret@127.0.0.1:{port}")
    code, _, err = cli("validate", RECIPES / "cls.toml", *set_args('train.report_to=["mlflow"]'))
    assert code == 2
    assert (
        f"train.report_to: the MLflow tracking server of MLFLOW_TRACKING_URI=http://someone@127.0.0.1:{port} "
        f"does not answer (Connection refused): start it (mlflow server --host 127.0.0.1 --port {port})" in err
    )
    assert "secret" not in err
    code, _, err = cli("validate", RECIPES / "cls.toml")  # without mlflow in train.report_to: no such check
    assert code == 0, err


def test_run_tracked_in_a_sqlite_store(tmp_path):
    """A run with train.report_to = ["mlflow"] and MLFLOW_TRACKING_URI = sqlite:///...: its MLflow run
    has FINISHED with the training loss history of log_history.json, the final figures of
    metrics.json, the learning rate among its parameters, and the card, metrics and recipe as
    artifacts equal to the run folder's files."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = nlptasks(
        "run",
        RECIPES / "cls.toml",
        "--no-progress",
        *set_args(*SETS, f"output.dir={tmp_path / 'runs'}", "output.run_name=a"),
        cwd=tmp_path,
        env=tracked_env(uri, "nlptasks-tests"),
    )
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "runs" / "cls" / "a"
    client, run = mlflow_run_of(run_dir, uri)
    assert run.info.status == "FINISHED" and run.info.run_name == "a"
    assert client.get_experiment(run.info.experiment_id).name == "nlptasks-tests"
    assert f"mlflow: run {run.info.run_id} in experiment 'nlptasks-tests' at {uri}" in done.stderr
    # the history as the Trainer logged it, step by step
    history = json.loads((run_dir / "log_history.json").read_text(encoding="utf-8"))
    losses = [(e["step"], e["loss"]) for e in history if "loss" in e]
    assert len(losses) >= 4
    logged = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")]
    assert [s for s, _ in logged] == [s for s, _ in losses]
    assert [v for _, v in logged] == pytest.approx([v for _, v in losses])
    # the final figures, as metrics.json has them
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    for split in ("validation", "test"):
        assert run.data.metrics[f"{split}/accuracy"] == pytest.approx(metrics[split]["accuracy"])
        assert run.data.metrics[f"{split}/f1/正面"] == pytest.approx(metrics[split]["f1/正面"])
    assert run.data.metrics["train/steps"] == metrics["train"]["steps"] == 10
    assert float(run.data.params["learning_rate"]) == 5e-4
    assert run.data.tags["nlptasks.task"] == "cls" and run.data.tags["nlptasks.run_dir"] == str(run_dir)
    # the run's files, as artifacts (MLflow's default place for a SQLite store: ./mlruns)
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"README.md", "metrics.json", "recipe.toml", "nlptasks.json", "training_curves.png"} <= names
    for name in ("README.md", "metrics.json", "recipe.toml"):
        assert artifact_text(client, run.info.run_id, name, tmp_path / "got") == (run_dir / name).read_bytes()
    assert run.info.artifact_uri.startswith(str(tmp_path / "mlruns"))
    card = (run_dir / "README.md").read_text(encoding="utf-8")
    assert f"| tracked in | MLflow run `{run.info.run_id}`, experiment `nlptasks-tests`, at `{uri}` |" in card


FAILS_ONCE = """
import sys
from nlptasks import hookimpl
from nlptasks.cli import main
from nlptasks.testing import plugin_host, using_host

class FailsOnce:
    failed = False

    @hookimpl
    def nlptasks_report(self, ctx, trainer, data, metrics):
        if not FailsOnce.failed:
            FailsOnce.failed = True
            raise RuntimeError("the report plugin failed")
        return []

host = plugin_host(builtins=True)
host.register(FailsOnce(), name="fails-once")
with using_host(host):
    try:
        first = main(sys.argv[1:])
    except RuntimeError as exc:  # a plugin's own error goes on as it is, traceback and all
        first = repr(exc)
    import mlflow

    experiment = mlflow.get_experiment_by_name("failing").experiment_id
    status = [r.info.status for r in mlflow.MlflowClient().search_runs([experiment])]
    print(f"first attempt: {first}; MLflow runs: {status}", file=sys.stderr, flush=True)
    sys.exit(main([*sys.argv[1:], "--resume"]))
"""


def test_failed_run_is_failed_and_resume_continues_it(tmp_path):
    """A run that fails after training began (a report plugin raising, before COMPLETE) ends its
    MLflow run FAILED; --resume continues that same MLflow run and ends it FINISHED."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sets = [*SETS, "data.max_train_rows=100", f"output.dir={tmp_path / 'runs'}", "output.run_name=f"]
    argv = ["run", str(RECIPES / "cls.toml"), "--no-progress", *set_args(*sets)]
    done = run_process([sys.executable, "-c", FAILS_ONCE, *argv], cwd=tmp_path, env=tracked_env(uri, "failing"))
    said = "first attempt: RuntimeError('the report plugin failed'); MLflow runs: ['FAILED']"
    assert said in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("failing").experiment_id])
    assert len(runs) == 1, "the resumed run logs into the MLflow run of its first attempt"
    lines = [line for line in done.stderr.splitlines() if "mlflow: run" in line]
    assert len(lines) == 3, done.stderr  # started, continued, finished: one id
    assert all(runs[0].info.run_id in line for line in lines) and "(continued)" in lines[1]
    run_dir = tmp_path / "runs" / "cls" / "f"
    _, run = mlflow_run_of(run_dir, uri)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["test/accuracy"] == pytest.approx(
        json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))["test"]["accuracy"]
    )


@pytest.mark.slow  # the server alone takes 11 s to answer on an idle 2-core machine, 20 s on a busy one
def test_run_tracked_by_a_server(tmp_path, server):
    """The same run against ``mlflow server`` at http://127.0.0.1:N: FINISHED, the final figures, and
    the card uploaded through the server into its artifact folder."""
    url = ready(server)
    done = nlptasks(
        "run",
        RECIPES / "cls.toml",
        "--no-progress",
        *set_args(*SETS, "data.max_train_rows=100", f"output.dir={tmp_path / 'runs'}", "output.run_name=s"),
        cwd=tmp_path,
        env=tracked_env(url, "served"),
    )
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "runs" / "cls" / "s"
    client, run = mlflow_run_of(run_dir, url)
    assert run.info.status == "FINISHED"
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert run.data.metrics["validation/accuracy"] == pytest.approx(metrics["validation"]["accuracy"])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [2, 4]
    card = (run_dir / "README.md").read_bytes()
    assert artifact_text(client, run.info.run_id, "README.md", tmp_path / "got") == card
    stored = list((server[2] / "artifacts").rglob("README.md"))
    assert len(stored) == 1 and stored[0].read_bytes() == card  # in the server's folder, not ./mlruns here
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.slow  # two training processes (~30 s here)
def test_a_distributed_run_is_one_mlflow_run_logged_by_rank_0(tmp_path):
    """``nlptasks run --nproc 2``: one MLflow run (rank 1 starts none and logs nothing), FINISHED,
    with the history and final figures of the run folder that rank 0 wrote."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**tracked_env(uri, "ddp"), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # CPU ranks (gloo)
    sets = [
        *SETS,
        "data.max_train_rows=64",
        "data.max_eval_rows=16",
        "train.batch_size=8",
        f"output.dir={tmp_path / 'runs'}",
    ]
    done = run_process(
        [sys.executable, "-m", "nlptasks", "run", str(RECIPES / "cls.toml"), "--nproc", "2", "--no-progress"]
        + set_args(*sets, "output.run_name=ddp"),
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("mlflow: run ") == 2, done.stderr  # started and finished, by rank 0 alone
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("ddp").experiment_id])
    run_dir = tmp_path / "runs" / "cls" / "ddp"
    assert run.info.run_id == mlflow_run_of(run_dir, uri)[1].info.run_id
    assert run.info.status == "FINISHED"
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert run.data.metrics["test/accuracy"] == pytest.approx(metrics["test"]["accuracy"])
    history = json.loads((run_dir / "log_history.json").read_text(encoding="utf-8"))
    losses = [e["step"] for e in history if "loss" in e]
    assert losses and [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == losses
