"""``nlptasks ui``'s JSON API through the real app (``TestClient``: the app's lifespan runs, so its
job thread starts real ``python -m nlptasks run`` processes), and the command itself in a process.

Two tiny complete cls runs are trained once for the module (seconds each).  What the API answers
is checked against what the project's own code gives for the same folders: ``nlptasks compare``'s
table, ``nlptasks.load``'s predictions, the run's ``log_history.json``, and the ``metrics.json`` of
the same ``nlptasks run`` command run in a terminal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import IDLE_S, RECIPES, TINY, communicate, free_port, nlptasks, tiny_run, wait_for

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

SMALL = ("data.max_train_rows=64", "data.max_eval_rows=8")
TIMES = ("runtime", "per_second", "mfu", "peak_tflops", "peak_source", "seconds", "resources")
"""Keys of metrics.json that measure time or memory: they differ between two runs of one command."""


def without_times(value):
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if not any(t in k for t in TIMES)}
    return value


@pytest.fixture(scope="module")
def folders(runs):
    """A runs folder with two complete tiny cls runs (``a``, ``b``), and the recipes folder."""
    root = runs / "ui"
    tiny_run(root, "cls.toml", "a", *SMALL, "train.logging_steps=1")
    tiny_run(root, "cls.toml", "b", *SMALL, "train.logging_steps=1", "train.learning_rate=2e-3")
    return root, RECIPES


def client_for(root: Path, recipes: Path, **settings):
    from fastapi.testclient import TestClient

    from nlptasks.ui.app import create_app
    from nlptasks.ui.state import UiSettings, UiState

    return TestClient(create_app(UiState.of([root], [recipes], UiSettings(**settings))))


@pytest.fixture(scope="module")
def client(folders):
    with client_for(*folders) as c:
        yield c


def error(resp, status: int) -> str:
    assert resp.status_code == status, resp.text
    return resp.json()["error"]["message"]


def test_the_runs_list_and_a_run_say_what_the_folders_hold(client, folders):
    root, _ = folders
    rows = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert set(rows) == {"0/cls/a", "0/cls/b"}
    metrics = json.loads((root / "cls" / "a" / "metrics.json").read_text(encoding="utf-8"))
    a = rows["0/cls/a"]
    assert (a["task"], a["status"], a["recipe"]) == ("cls", "complete", str(RECIPES / "cls.toml"))
    assert a["metric"] == {"name": "accuracy", "split": "test", "value": metrics["test"]["accuracy"]}
    assert a["seconds"] == metrics["seconds"] and a["tokens_per_second"] == metrics["train"]["tokens_per_second"]

    run = client.get("/api/run", params={"id": "0/cls/a"}).json()
    assert run["card"] == (root / "cls" / "a" / "README.md").read_text(encoding="utf-8")
    assert run["metrics"]["test"]["accuracy"] == metrics["test"]["accuracy"]
    labels = json.loads((root / "cls" / "a" / "labels.json").read_text(encoding="utf-8"))
    assert set(run["per_class"]["test"]["rows"]) == set(labels)
    assert run["commands"]["infer"].startswith(f"nlptasks infer --model {root / 'cls' / 'a'} ")
    assert run["commands"]["serve"] == f"nlptasks serve {root / 'cls' / 'a'}"

    history = json.loads((root / "cls" / "a" / "log_history.json").read_text(encoding="utf-8"))
    losses = [(e["step"], e["loss"]) for e in history if "loss" in e]
    curve = client.get("/api/run/curve", params={"id": "0/cls/a"}).json()
    assert curve["source"] == "log_history" and curve["status"] == "complete"
    assert [(p["step"], p["values"]["loss"]) for p in curve["points"] if "loss" in p["values"]] == losses
    middle = curve["points"][len(curve["points"]) // 2]["step"]  # what a page that has the earlier points asks
    later = client.get("/api/run/curve", params={"id": "0/cls/a", "from_step": middle}).json()
    assert later["from_step"] == middle and later["points"] == [p for p in curve["points"] if p["step"] >= middle]

    picture = client.get("/api/run/file", params={"id": "0/cls/a", "name": "training_curves.png"})
    assert picture.status_code == 200 and picture.content[:4] == b"\x89PNG"
    assert "pictures and text" in error(
        client.get("/api/run/file", params={"id": "0/cls/a", "name": "model.safetensors"}), 400
    )


def test_compare_is_the_table_nlptasks_compare_prints(client, folders):
    from nlptasks.pipeline.compare import compare

    root, _ = folders
    body = client.get("/api/compare", params=[("id", "0/cls/a"), ("id", "0/cls/b")]).json()
    assert body["table"] == compare([(root / "cls" / "a").resolve(), (root / "cls" / "b").resolve()])
    assert set(body["curves"]) == {"0/cls/a", "0/cls/b"} and all(body["curves"].values())
    assert "two runs or more" in error(client.get("/api/compare", params={"id": "0/cls/a"}), 400)


def test_every_path_is_confined_to_the_folders_given(client, folders, tmp_path):
    root, _ = folders
    outside = tmp_path / "outside"
    shutil.copytree(root / "cls" / "a", outside / "cls" / "x")
    (root / "cls" / "link").symlink_to(outside / "cls" / "x")
    (root / "cls" / "a" / "secret.txt").symlink_to(Path("/etc/hostname"))
    try:
        for bad in ("0/cls/..", "0/../a", "0/cls/."):
            assert "has an empty, '.' or '..' part" in error(client.get("/api/run", params={"id": bad}), 400)
        for bad in ("0/cls/../../..", "../x/y", "0/cls"):
            assert "not a run id" in error(client.get("/api/run", params={"id": bad}), 400)
        assert "not a run id" in error(client.get("/api/run", params={"id": "/etc/passwd"}), 400)
        assert "is an absolute path" in error(client.get("/api/run", params={"id": "0//a"}), 400)
        assert "leads outside" in error(client.get("/api/run", params={"id": "0/cls/link"}), 403)
        assert "0/cls/link" not in {r["id"] for r in client.get("/api/runs").json()["runs"]}
        for name in ("../b/metrics.json", "/etc/hostname", "../../../../etc/hostname"):
            assert client.get("/api/run/file", params={"id": "0/cls/a", "name": name}).status_code == 400, name
        assert "leads outside" in error(
            client.get("/api/run/file", params={"id": "0/cls/a", "name": "secret.txt"}), 403
        )
        for recipe in ("r0/../pyproject.toml", "/etc/hostname", "r0//cls.toml", "run/0/cls/../../x"):
            assert client.get("/api/recipe", params={"id": recipe}).status_code == 400, recipe
        assert "absolute" in error(client.post("/api/validate", json={"recipe": "r0//etc/x.toml"}), 400)
    finally:
        (root / "cls" / "link").unlink()
        (root / "cls" / "a" / "secret.txt").unlink()


def test_a_damaged_or_deleted_run_is_a_message_never_a_500(client, folders):
    root, _ = folders
    damaged = root / "cls" / "damaged"
    shutil.copytree(root / "cls" / "a", damaged)
    (damaged / "metrics.json").write_text("{not json", encoding="utf-8")
    (damaged / "log_history.json").write_text("[", encoding="utf-8")
    rows = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert rows["0/cls/damaged"]["status"] == "damaged"
    assert "metrics.json: not JSON" in rows["0/cls/damaged"]["note"]
    run = client.get("/api/run", params={"id": "0/cls/damaged"})
    assert run.status_code == 200 and any("metrics.json" in p for p in run.json()["problems"])
    assert "log_history.json" in client.get("/api/run/curve", params={"id": "0/cls/damaged"}).json()["problem"]
    shutil.rmtree(damaged)
    for route in ("/api/run", "/api/run/curve", "/api/try"):
        assert "is not there (deleted or moved?)" in error(client.get(route, params={"id": "0/cls/damaged"}), 404)


def test_the_api_key_guards_every_api_route(folders):
    with client_for(*folders, api_key="s3cret") as c:
        assert c.get("/").status_code == 200 and c.get("/static/app.js").status_code == 200
        for method, path, body in (
            ("GET", "/api/runs", None),
            ("POST", "/api/jobs", {"recipe": "r0/cls.toml"}),
            ("POST", "/api/jobs/x/stop", None),
            ("POST", "/api/resume", {"id": "0/cls/a"}),
            ("POST", "/api/try", {"id": "0/cls/a", "inputs": ["好"]}),
        ):
            assert "needs an API key" in error(c.request(method, path, json=body), 401)
        assert "wrong API key" in error(c.get("/api/runs", headers={"Authorization": "Bearer nope"}), 401)
        assert c.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_validate_reports_every_problem_at_its_key_and_guards_remote_code(client):
    body = {
        "recipe": "r0/cls.toml",
        "overrides": {
            "train.learning_rate": "2",
            "train.batch_size": "abc",
            "nope": "1",
            "model.trust_remote_code": "true",
        },
    }
    result = client.post("/api/validate", json=body).json()
    where = {p["where"] for p in result["problems"]}
    assert {"train.learning_rate", "train.batch_size", "nope", "model.trust_remote_code"} <= where
    assert not result["ok"] and "--set train.learning_rate=2" in result["command"]
    allowed = client.post("/api/validate", json={"recipe": "r0/cls.toml", "overrides": {"output.dir": "/tmp"}}).json()
    assert [p["where"] for p in allowed["problems"]] == ["output.dir"]
    started = client.post("/api/jobs", json={"recipe": "r0/cls.toml", "overrides": {"model.allow_pickle": "true"}})
    assert error(started, 400).startswith("the recipe has 1 problem(s): model.allow_pickle: ")
    assert started.json()["problems"][0]["where"] == "model.allow_pickle"
    assert client.post("/api/validate", json={"recipe": "r0/cls.toml"}).json()["ok"]


def test_a_run_started_from_the_ui_gives_the_metrics_of_the_same_command(client, folders):
    root, _ = folders
    overrides = dict(item.split("=", 1) for item in (*TINY, *SMALL, "train.epochs=1", "train.logging_steps=1"))
    started = client.post("/api/jobs", json={"recipe": "r0/cls.toml", "overrides": overrides})
    assert started.status_code == 201, started.text
    job, run_id = started.json()["job"], started.json()["run"]
    run_dir = root / "cls" / run_id.split("/")[-1]
    deadline = time.monotonic() + IDLE_S
    while (ended := {j["id"]: j for j in client.get("/api/jobs").json()["jobs"]}[job["id"]])["state"] in (
        "queued",
        "running",
    ):
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.3)
    assert ended["state"] == "complete" and ended["exit_code"] == 0, job["log"]

    # the same command in a terminal, into another run name
    argv = job["command"].split()[1:]
    argv[-1] = "output.run_name=terminal"
    done = nlptasks(*argv)
    assert done.returncode == 0, done.stderr
    ui_metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    cli_metrics = json.loads((root / "cls" / "terminal" / "metrics.json").read_text(encoding="utf-8"))
    assert without_times(ui_metrics) == without_times(cli_metrics)

    # the live log the page read while it trained: the Trainer's own losses, to the 4 decimals it prints
    from nlptasks.ui.curves import LogReader, points_from_history

    live, progress = LogReader().read(Path(job["log"]))
    history = json.loads((run_dir / "log_history.json").read_text(encoding="utf-8"))
    exact = [(p["step"], p["values"]["loss"]) for p in points_from_history(history) if "loss" in p["values"]]
    logged = [(p["step"], p["values"]["loss"]) for p in live if "loss" in p["values"]]
    assert [s for s, _ in logged] == [s for s, _ in exact] and exact
    assert all(abs(a - b) <= 5e-5 for (_, a), (_, b) in zip(logged, exact, strict=True))
    assert progress == {"step": exact[-1][0], "max_steps": exact[-1][0]}


def test_try_loads_on_demand_within_the_bound(folders):
    import nlptasks

    root, recipes = folders
    texts = ["这家酒店服务很好", "差"]
    with client_for(root, recipes, max_loaded=1, unload_after_s=60) as c:
        assert c.get("/api/models").json()["loaded"] == []
        info = c.get("/api/try", params={"id": "0/cls/a"}).json()
        assert info["inputs"][0]["name"] == "text" and not info["loaded"]
        first = c.post("/api/try", json={"id": "0/cls/a", "inputs": texts}).json()
        assert first["outputs"] == nlptasks.load(root / "cls" / "a")(texts)
        assert [m["id"] for m in first["loaded"]] == ["0/cls/a"]
        second = c.post("/api/try", json={"id": "0/cls/b", "inputs": texts}).json()
        assert [m["id"] for m in second["loaded"]] == ["0/cls/b"]  # the bound: loading b unloaded a
        c.post("/api/models/unload", json={"id": "0/cls/b"})
        assert c.get("/api/models").json()["loaded"] == []


def test_studies_show_the_trials_of_a_real_optuna_study(client, folders):
    optuna = pytest.importorskip("optuna")
    root, _ = folders
    study_dir = root / "cls" / "tune-lr"
    study_dir.mkdir()
    study = optuna.create_study(study_name="lr", storage=f"sqlite:///{study_dir / 'study.db'}", direction="maximize")
    study.set_user_attr("objective", "accuracy")
    distribution = {"train.learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    for value, lr in ((0.5, 1e-3), (0.75, 3e-3)):
        study.add_trial(
            optuna.trial.create_trial(params={"train.learning_rate": lr}, distributions=distribution, value=value)
        )
    (study_dir / "best.toml").write_text('task = "cls"\n', encoding="utf-8")
    assert [s["id"] for s in client.get("/api/studies").json()["studies"]] == ["0/cls/tune-lr"]
    detail = client.get("/api/study", params={"id": "0/cls/tune-lr"}).json()
    assert [(t["number"], t["state"], t["value"]) for t in detail["trials"]] == [
        (0, "complete", 0.5),
        (1, "complete", 0.75),
    ]
    assert (detail["best"], detail["metric"], detail["direction"]) == (1, "accuracy", "maximize")
    assert detail["best_toml"] == 'task = "cls"\n'
    assert "not a study id" in error(client.get("/api/study", params={"id": "0/cls/a"}), 400)


def test_the_command_serves_the_page_and_stops_on_ctrl_c(folders):
    root, recipes = folders
    import httpx

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nlptasks", "ui", "--runs", str(root), "--recipes", str(recipes), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ},
    )

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, proc)
    assert "<title>nlptasks ui</title>" in httpx.get(f"http://127.0.0.1:{port}/").text
    proc.send_signal(signal.SIGINT)
    out, err = communicate(proc)
    assert proc.returncode == 0, err
    assert f"page:    http://127.0.0.1:{port}/" in err and "dashboard stopped" in err


def test_the_queue_runs_one_job_at_a_time_and_a_queued_one_can_leave(tmp_path):
    from nlptasks.ui.jobs import Jobs

    jobs = Jobs([tmp_path], max_parallel=1)
    first = jobs.submit("r0/x.toml", ["plugins"], tmp_path / "cls" / "one", tmp_path)
    second = jobs.submit("r0/x.toml", ["schema"], tmp_path / "cls" / "two", tmp_path)
    third = jobs.submit("r0/x.toml", ["plugins"], tmp_path / "cls" / "three", tmp_path)
    assert (first.state, second.state, third.state) == ("running", "queued", "queued")
    assert jobs.stop(third.id).state == "stopped"
    deadline = time.monotonic() + IDLE_S
    while second.state in ("queued", "running"):
        assert time.monotonic() < deadline
        assert not (first.state == "running" and second.state == "running"), "two jobs ran at once"
        jobs.reap()
        time.sleep(0.05)
    assert (first.state, first.exit_code, second.state, second.exit_code, third.pid) == (
        "complete",
        0,
        "complete",
        0,
        None,
    )
    assert '"$defs"' in second.log.read_text(encoding="utf-8")  # its output went to its log
    again = Jobs([tmp_path])  # a dashboard started again knows how its jobs ended
    assert {j.id: j.state for j in again.jobs.values()} == {
        first.id: "complete",
        second.id: "complete",
        third.id: "stopped",
    }
