"""``nlptasks serve``: the core app (predict, models, health, metrics), dynamic batching, the
limits and errors, and the command itself in a real process.

Parity is the point: ``POST /v1/predict/{name}`` answers exactly what ``nlptasks.load(run)(inputs)``
returns and ``nlptasks infer`` prints, for every task, alone and under concurrency (where requests
share batches).  Four tiny runs (cls, ner, pair, sft) are trained once for the module (seconds
each); most tests talk to the app in-process (``TestClient`` / ``httpx``), one starts the real
server with the CLI and stops it with SIGTERM while a request is in flight.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import IDLE_S, RECIPES, ROOT, TINY_DECODER, communicate, free_port, tiny_run, wait_for

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

INPUTS = {
    "cls": ["这家酒店服务很好，房间也干净", "差", "房间又脏又吵，太差了，再也不来了！！", "好" * 80, "还行"],
    "ner": ["小明在北京大学读书", "李娜去了杭州", "", "张伟在华星科技公司工作，后来去了北京大学读书。" * 4],
    "pair": ["酒店早餐几点开始", "早饭几点开始供应", "怎么开发票", "我想退掉火车票"],  # consecutive texts: 2 pairs
    "sft": ["你好", "湖畔酒店几点可以入住？", "早餐几点开始？"],
}
RICH = {  # objects and lists of fields, as a jsonl file's rows would give them
    "cls": [{"text": "服务很好"}, "房间很差"],
    "ner": [{"tokens": list("王芳在上海")}, {"text": "小明在北京"}],
    "pair": [{"text_a": "密码忘了", "text_b": "怎么重置密码"}, ["好", "好的"], "可以带宠物吗\t宠物能带进房间吗"],
    "sft": [{"instruction": "介绍一下酒店", "input": ""}],
}


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(runs) -> dict[str, Path]:
    """One tiny run per task (seconds each, in-process), by task."""
    sft_rows = [
        json.loads(line)
        for line in (RECIPES / "data" / "sft" / "train.jsonl").read_text(encoding="utf-8").splitlines()[:24]
    ]
    sft_data = runs / "sft24.jsonl"
    sft_data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in sft_rows), encoding="utf-8")
    return {
        **{task: tiny_run(runs, f"{task}.toml", task, "data.max_train_rows=300") for task in ("cls", "ner", "pair")},
        "sft": tiny_run(
            runs,
            "sft.toml",
            "sft",
            "peft.method=none",
            f"data.train={sft_data}",
            f"data.validation={sft_data}",
            "data.test=",
            "train.batch_size=8",
            "options.generation_eval.rows=2",
            "options.generation_eval.max_new_tokens=4",
            tiny=TINY_DECODER,
            epochs=12,
        ),
    }


@pytest.fixture(scope="module")
def models(trained):
    from nlptasks.serve.models import load_models

    return load_models(list(trained.values()), list(trained))


def serve(models, **settings):
    """A fresh app over ``models`` (own worker threads and batchers), with these settings."""
    from nlptasks.serve.app import create_app
    from nlptasks.serve.state import ServedModel, ServerState, ServeSettings

    fresh = {name: ServedModel(name, m.run_dir, m.manifest, m.predictor) for name, m in models.items()}
    state = ServerState(fresh, ServeSettings(**settings))
    return create_app(state), state


@pytest.fixture(scope="module")
def client(models):
    from fastapi.testclient import TestClient

    app, state = serve(models)
    with TestClient(app) as c:
        yield c
    state.close()


def same(a, b) -> None:
    """Equal results: the same labels, entities, texts; scores within 1e-4 (tests/test_parity.py)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (a, b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, float):
        assert a == pytest.approx(b, abs=1e-4)
    else:
        assert a == b


def metric(text: str, name: str, **labels) -> float:
    """One sample of the Prometheus text ``text``."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in\n{text}")


# -- parity ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["cls", "ner", "pair", "sft"])
def test_predict_equals_load_and_infer(task, trained, client, cli):
    """All four runs served at once by name; each answers what nlptasks.load and nlptasks infer give."""
    import nlptasks

    answer = client.post(f"/v1/predict/{task}", json={"inputs": INPUTS[task]})
    assert answer.status_code == 200, answer.text
    outputs = answer.json()["outputs"]
    assert outputs == nlptasks.load(trained[task])(INPUTS[task])
    code, out, err = cli("infer", "--model", trained[task], *INPUTS[task])
    assert code == 0, err
    assert outputs == [json.loads(line) for line in out.splitlines()]
    assert len(outputs) == (len(INPUTS[task]) // 2 if task == "pair" else len(INPUTS[task]))

    rich = client.post(f"/v1/predict/{task}", json={"inputs": RICH[task]})
    assert rich.status_code == 200, rich.text
    assert rich.json()["outputs"] == nlptasks.load(trained[task])(RICH[task])
    if task == "sft":
        assert any(len(o["response"]) > 2 for o in outputs), outputs  # real answers, not just a stop token


def test_models_health_and_metrics(client):
    listed = client.get("/v1/models").json()
    assert listed["object"] == "list"
    assert [(m["id"], m["task"], m["object"], m["owned_by"]) for m in listed["data"]] == [
        (t, t, "model", "nlptasks") for t in ("cls", "ner", "pair", "sft")
    ]
    assert client.get("/health").json() == {
        "status": "ok",
        "models": ["cls", "ner", "pair", "sft"],
        "worker": os.getpid(),
    }
    client.post("/v1/predict/cls", json={"inputs": ["好"]})
    client.post("/v1/predict/nope", json={"inputs": ["好"]})
    text = client.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    body = text.text
    assert metric(body, "nlptasks_requests_total", model="cls", endpoint="/v1/predict/{name}", status="200") >= 1
    assert metric(body, "nlptasks_requests_total", model="", endpoint="/v1/predict/{name}", status="404") >= 1
    for q in ("0.5", "0.9", "0.99"):
        assert metric(body, "nlptasks_request_duration_seconds", model="cls", quantile=q) > 0
    assert metric(body, "nlptasks_batch_size_count", model="cls") >= 1
    assert metric(body, "nlptasks_batch_size_bucket", model="cls", le="+Inf") >= 1
    assert metric(body, "nlptasks_queue_inputs", model="cls") == 0
    assert "# TYPE nlptasks_request_duration_seconds summary" in body
    assert "# TYPE nlptasks_batch_size histogram" in body
    assert client.get("/docs").status_code == 200
    assert "/v1/predict/{name}" in client.get("/openapi.json").json()["paths"]


def test_concurrent_requests_share_batches_and_answer_as_one_at_a_time(models):
    """40 concurrent requests of mixed lengths to two models, batches of at most 8: every answer is
    its inputs' one-at-a-time result, and batches of more than one input happened."""
    app, state = serve(models, max_batch_size=8, max_wait_ms=20)
    texts = INPUTS["cls"] + ["一般般", "前台态度一般", "位置不错但是隔音很差，晚上睡不好"]
    requests = []
    for i in range(40):
        model = "ner" if i % 4 == 3 else "cls"
        pool = INPUTS["ner"] if model == "ner" else texts
        requests.append((model, [pool[(i + j) % len(pool)] for j in range(1 + i % 3)]))

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
            answers = await asyncio.gather(*(c.post(f"/v1/predict/{m}", json={"inputs": x}) for m, x in requests))
            return answers, (await c.get("/metrics")).text

    answers, text = asyncio.run(go())
    alone = {}
    for model, inputs in requests:
        for x in inputs:
            if (model, x) not in alone:
                alone[(model, x)] = models[model].predictor([x])[0]
    for (model, inputs), answer in zip(requests, answers, strict=True):
        assert answer.status_code == 200, answer.text
        same(answer.json()["outputs"], [alone[(model, x)] for x in inputs])
    batches = metric(text, "nlptasks_batch_size_count", model="cls")
    singles = metric(text, "nlptasks_batch_size_bucket", model="cls", le="1")
    assert batches - singles >= 1, text  # some predictor calls held several inputs
    assert metric(text, "nlptasks_batch_size_bucket", model="cls", le="8") == batches  # never more than 8
    assert batches < sum(len(x) for m, x in requests if m == "cls")  # fewer calls than inputs
    state.close()


def test_a_bad_input_fails_only_its_own_request(models, caplog):
    """In one batch: a request the task cannot read gets 400 naming the input, one whose predictor
    call raises gets a one-line 500 (traceback in the log), the others their answers."""
    from nlptasks.serve.state import ServedModel

    app, state = serve(models, max_batch_size=32, max_wait_ms=50)
    real = models["cls"].predictor

    def flaky(inputs):
        if any(x == "BOOM" for x in inputs):
            raise RuntimeError("exploded\nsecond line")
        return real(inputs)

    state.models["cls"] = ServedModel("cls", models["cls"].run_dir, models["cls"].manifest, flaky)
    from nlptasks.serve.batching import Batcher

    state.models["cls"].batcher = Batcher(state.models["cls"], state.settings, state.metrics)
    bodies = [["好", "差"], ["好", {"txt": "x"}], ["还行"], ["BOOM"], ["房间很差"]]

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
            return await asyncio.gather(*(c.post("/v1/predict/cls", json={"inputs": b}) for b in bodies))

    with caplog.at_level(logging.ERROR, logger="nlptasks.serve"):
        answers = asyncio.run(go())
    codes = [a.status_code for a in answers]
    assert codes == [200, 400, 200, 500, 200], [a.text for a in answers]
    error = answers[1].json()["error"]
    assert error["field"] == "inputs[1]" and "no 'text' field" in error["message"]
    assert error["message"].startswith("inputs[1]: ")
    crash = answers[3].json()["error"]["message"]
    assert "RuntimeError: exploded" in crash and "\n" not in crash
    assert "Traceback" in caplog.text and "second line" in caplog.text
    for body, answer in zip(bodies, answers, strict=True):
        if answer.status_code == 200:
            same(answer.json()["outputs"], real(body))
    state.close()


# -- limits ------------------------------------------------------------------------------------------


def test_full_queue_answers_503_with_retry_after_and_timeout_504(models):
    """The worker blocked: one request runs, two wait (the queue holds 2 inputs), the next gets 503
    at once; after the worker is free, the waiting ones are answered.  A short timeout gives 504."""
    app, state = serve(models, max_batch_size=1, max_wait_ms=0, max_queue=2, timeout_s=30)
    gate = threading.Event()
    state.models["cls"].executor.submit(gate.wait)

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
            first = asyncio.ensure_future(c.post("/v1/predict/cls", json={"inputs": ["好"]}))
            await asyncio.sleep(0.2)  # taken into a batch: waits for the worker
            waiting = [asyncio.ensure_future(c.post("/v1/predict/cls", json={"inputs": [t]})) for t in ("差", "还行")]
            await asyncio.sleep(0.2)
            refused = await c.post("/v1/predict/cls", json={"inputs": ["一般"]})
            gauge = metric((await c.get("/metrics")).text, "nlptasks_queue_inputs", model="cls")
            gate.set()
            return refused, gauge, await first, await asyncio.gather(*waiting)

    refused, gauge, first, waiting = asyncio.run(go())
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "1"
    assert "limit 2" in refused.json()["error"]["message"]
    assert gauge == 2
    assert [r.status_code for r in (first, *waiting)] == [200, 200, 200]
    state.close()

    app, state = serve(models, timeout_s=0.3)
    gate = threading.Event()
    state.models["cls"].executor.submit(gate.wait)
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        late = c.post("/v1/predict/cls", json={"inputs": ["好"]})
        gate.set()
        assert late.status_code == 504 and "timeout" in late.json()["error"]["message"]
        assert c.post("/v1/predict/cls", json={"inputs": ["好"]}).status_code == 200  # and it goes on
    state.close()


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"input": ["好"]}, "inputs", ["inputs: required", "did you mean 'inputs'"]),
        ({"inputs": []}, "inputs", ["inputs: empty"]),
        ({"inputs": "好"}, "inputs", ["must be a list", "got a string"]),
        ({"inputs": ["好", 3]}, "inputs[1]", ["inputs[1]: must be a text"]),
        (b"{not json", "body", ["not valid JSON"]),
        (b"", "body", ["body: empty"]),
        ([1, 2], "body", ["must be a JSON object"]),
    ],
)
def test_bad_requests_get_400_naming_the_field(client, body, field, words):
    if isinstance(body, bytes):
        answer = client.post("/v1/predict/cls", content=body, headers={"Content-Type": "application/json"})
    else:
        answer = client.post("/v1/predict/cls", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and error["type"] == "invalid_request_error"
    for w in words:
        assert w in error["message"]


def test_size_limits(models):
    from fastapi.testclient import TestClient

    app, state = serve(models, max_body_bytes=10_000, max_inputs=3)
    with TestClient(app) as c:
        huge = c.post("/v1/predict/cls", json={"inputs": ["好" * 20_000]})
        assert huge.status_code == 413 and huge.json()["error"]["field"] == "body"
        many = c.post("/v1/predict/cls", json={"inputs": ["好"] * 4})
        assert many.status_code == 400 and "more than the limit of 3" in many.json()["error"]["message"]
        assert c.post("/v1/predict/cls", json={"inputs": ["好"] * 3}).status_code == 200
        unknown = c.post("/v1/predict/nope", json={"inputs": ["好"]})
        assert unknown.status_code == 404 and "served: cls, ner, pair, sft" in unknown.json()["error"]["message"]
    state.close()


def test_api_key(models, monkeypatch):
    from fastapi.testclient import TestClient

    app, state = serve(models, api_key="s3cret")
    with TestClient(app) as c:
        for path in ("/v1/models", "/metrics"):
            denied = c.get(path)
            assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
            assert "Authorization: Bearer" in denied.json()["error"]["message"]
        assert c.post("/v1/predict/cls", json={"inputs": ["好"]}).status_code == 401
        assert (
            c.post("/v1/predict/cls", json={"inputs": ["好"]}, headers={"Authorization": "Bearer wrong"}).status_code
            == 401
        )
        ok = c.post("/v1/predict/cls", json={"inputs": ["好"]}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert c.get("/v1/models", headers={"Authorization": "bearer s3cret"}).status_code == 200
        assert c.get("/health").status_code == 200
        schema = c.get("/openapi.json").json()
        assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    state.close()


def test_names_are_checked_before_loading(trained, cli, tmp_path):
    other = tmp_path / "other" / "cls"
    other.mkdir(parents=True)
    code, _, err = cli("serve", trained["cls"], trained["cls"])
    assert code == 2 and "two runs would be served as 'cls'" in err and "--name" in err
    code, _, err = cli("serve", trained["cls"], trained["ner"], "--name", "a")
    assert code == 2 and "1 --name for 2 runs" in err
    code, _, err = cli("serve", trained["cls"], "--name", "a b")
    assert code == 2 and "cannot be a model name" in err
    code, _, err = cli("serve", trained["cls"], other, "--name", "a", "--name", "b")
    assert code == 2 and str(other) in err  # not a complete run
    # with --workers, the same checks in the starting process, before any worker starts
    code, _, err = cli("serve", trained["cls"], other, "--name", "a", "--name", "b", "--workers", "2")
    assert code == 2 and str(other) in err and "Traceback" not in err
    code, _, err = cli("serve", trained["cls"], trained["cls"], "--workers", "2")
    assert code == 2 and "two runs would be served as 'cls'" in err


# -- a real server -----------------------------------------------------------------------------------


def test_a_client_that_leaves_does_not_disturb_the_others(models):
    """Over TCP (uvicorn in a thread): a client gives up while its request waits; the server drops it
    and answers the next requests."""
    import uvicorn

    app, state = serve(models)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + IDLE_S  # a hang guard: starting takes well under a second
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        gate = threading.Event()
        state.models["cls"].executor.submit(gate.wait)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/predict/cls", json={"inputs": ["好"]}, timeout=0.5)
        # The gate opens only once the server has seen the client go: on a busy machine the
        # disconnect can reach uvicorn after the gated work would have answered the request.
        deadline = time.monotonic() + IDLE_S
        while 'status="499"' not in httpx.get(f"{url}/metrics", timeout=120).text and time.monotonic() < deadline:
            time.sleep(0.05)
        gate.set()
        for _ in range(3):
            answer = httpx.post(f"{url}/v1/predict/ner", json={"inputs": ["小明在北京"]}, timeout=120)
            assert answer.status_code == 200
            answer = httpx.post(f"{url}/v1/predict/cls", json={"inputs": ["好"]}, timeout=120)
            assert answer.status_code == 200
        text = httpx.get(f"{url}/metrics", timeout=120).text
        assert metric(text, "nlptasks_requests_total", model="cls", status="499") == 1
    finally:
        server.should_exit = True
        thread.join(30)
        state.close()


def test_the_command_serves_and_stops_gracefully(trained):
    """`nlptasks serve` in its own process: /health, parity with nlptasks.load, then SIGTERM while a
    request is in flight: that request is answered and the process exits 0."""
    import nlptasks

    port = free_port()
    env = {**os.environ, "NLPTASKS_API_KEY": "k"}
    cmd = [
        sys.executable,
        "-m",
        "nlptasks",
        "serve",
        str(trained["cls"]),
        str(trained["pair"]),
        "--name",
        "sentiment",
        "--name",
        "pairs",
        "--port",
        str(port),
        "--max-wait-ms",
        "1500",
        "--no-access-log",
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer k"}

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=120).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, proc)  # as long as the server works on starting; fails if it exits or hangs
        answer = httpx.post(f"{url}/v1/predict/sentiment", json={"inputs": INPUTS["cls"]}, headers=auth, timeout=120)
        assert answer.json()["outputs"] == nlptasks.load(trained["cls"])(INPUTS["cls"])
        assert httpx.get(f"{url}/v1/models", timeout=120).status_code == 401

        result = {}

        def in_flight():
            result["answer"] = httpx.post(
                f"{url}/v1/predict/pairs", json={"inputs": INPUTS["pair"]}, headers=auth, timeout=120
            )

        thread = threading.Thread(target=in_flight)
        thread.start()
        time.sleep(0.7)  # the request waits 1.5 s for company (--max-wait-ms)
        proc.send_signal(signal.SIGTERM)
        thread.join()  # the request's own timeout bounds it
        out, _ = communicate(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result["answer"].status_code == 200, result["answer"].text
    assert result["answer"].json()["outputs"] == nlptasks.load(trained["pair"])(INPUTS["pair"])
    assert proc.returncode == 0, out
    assert f"docs:    {url}/docs" in out and "curl -s" in out and "server stopped" in out


class _Server:
    """``nlptasks serve RUN --name m ...`` in a process of its own: up once ``workers`` processes
    answer /health on the port (a worker still loading leaves its connections to the others);
    :meth:`stop` sends SIGINT and returns what it printed."""

    def __init__(self, run: Path, workers: int, *extra: str) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "nlptasks", "serve", str(run), "--name", "m", "--port", str(port), *extra]
        self.proc = subprocess.Popen(
            [*cmd, "--no-access-log"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        self.workers: set[int] = set()
        try:
            wait_for(lambda: self._health() and len(self.workers) == workers, self.proc)
        except BaseException:
            self.proc.kill()
            raise

    def _health(self) -> bool:
        try:
            answer = httpx.get(f"{self.url}/health", timeout=120, headers={"Connection": "close"})
        except httpx.TransportError:
            return False
        if answer.status_code == 200:
            self.workers.add(answer.json()["worker"])
        return True

    def predict(self, inputs: list) -> list:
        """A new connection (whichever worker takes it answers)."""
        answer = httpx.post(
            f"{self.url}/v1/predict/m", json={"inputs": inputs}, headers={"Connection": "close"}, timeout=120
        )
        return answer.json()["outputs"]

    def stop(self) -> str:
        try:
            self.proc.send_signal(signal.SIGINT)
            out, _ = communicate(self.proc)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert self.proc.returncode == 0, out
        return out


def test_workers_share_the_port_and_answer_alike(trained):
    """`nlptasks serve --workers 2`: two processes behind one port (each answers /health with its
    process id; new connections reach both), both answering what nlptasks.load answers; SIGINT
    stops them all."""
    import nlptasks

    server = _Server(trained["cls"], 2, "--workers", "2", "--threads", "1")
    try:
        expected = nlptasks.load(trained["cls"])(INPUTS["cls"])
        for _ in range(6):  # new connections: whichever worker takes them answers the same
            assert server.predict(INPUTS["cls"]) == expected
        assert server.proc.pid not in server.workers
    finally:
        out = server.stop()
    assert "server stopped" in out


def test_workers_end_with_their_supervisor_killed_and_free_the_port(trained):
    """kill -9 of `nlptasks serve --workers 2` left its workers answering on the port with the old
    model, and a new server there found the address in use: they now end with their supervisor."""
    import os
    import socket
    import time

    server = _Server(trained["cls"], 2, "--workers", "2", "--threads", "1")
    workers = set(server.workers)
    server.proc.kill()  # SIGKILL: the supervisor cannot stop its workers itself
    server.proc.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        stat = Path(f"/proc/{pid}/stat")
        return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))  # a zombie has ended

    deadline = time.monotonic() + 60  # a hang guard: they end within a second or two
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers), "workers outlived their supervisor"
    port = int(server.url.rsplit(":", 1)[1])
    with socket.socket() as s:  # the port is free for the next server
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_auto_workers_one_process_per_core_only_for_onnx_exports(trained, cli, tmp_path, monkeypatch):
    """`--workers auto` (the default): one process per core (at most 4) where every run answers
    with an ONNX export; one process for torch weights, a model that chats, a mix, one core, or
    --threads given."""
    import shutil

    from nlptasks.serve import processes
    from nlptasks.types import LoadOptions

    shutil.copytree(trained["cls"], tmp_path / "run")  # the export records itself in the run it came from
    code, _, err = cli("export", tmp_path / "run", "--onnx", tmp_path / "onnx", "--check-rows", "0")
    assert code == 0, err
    export, options = [tmp_path / "onnx"], LoadOptions()
    for cores, expected in ((8, 4), (3, 3), (2, 2), (1, 1)):
        monkeypatch.setattr(processes, "usable_cores", lambda cores=cores: cores)
        workers, why = processes.auto_workers(export, options, None)
        assert workers == expected, why
        assert ("ONNX export" in why) if expected > 1 else ("one CPU core" in why)
    monkeypatch.setattr(processes, "usable_cores", lambda: 4)
    assert processes.auto_workers(export, options, 2) == (1, "--threads was given")
    for runs in ([trained["ner"]], [trained["sft"]], [*export, trained["ner"]]):
        workers, why = processes.auto_workers(runs, options, None)
        assert (workers, "torch backend" in why) == (1, True), why


def test_default_workers_serve_an_export_from_one_process_per_core(trained, cli, tmp_path):
    """`nlptasks serve EXPORT` with no --workers: it says how many processes and why, and that many
    answer on the port, each what nlptasks.load answers."""
    import shutil

    import nlptasks
    from nlptasks.serve.processes import MOST_WORKERS, usable_cores

    shutil.copytree(trained["ner"], tmp_path / "run")  # the export records itself in the run it came from
    code, _, err = cli("export", tmp_path / "run", "--onnx", tmp_path / "onnx", "--check-rows", "0")
    assert code == 0, err
    expected_workers = min(usable_cores(), MOST_WORKERS) if usable_cores() > 1 else 1
    server = _Server(tmp_path / "onnx", expected_workers)
    try:
        assert server.predict(INPUTS["ner"]) == nlptasks.load(tmp_path / "onnx")(INPUTS["ner"])
    finally:
        out = server.stop()
    assert f"workers: {expected_workers} (" in out


def test_freed_memory_goes_back_to_the_system():
    """What the batcher does every few seconds: after batches of many shapes, freed tensors stay in
    glibc's heaps (the resident memory of a busy server crept up); malloc_trim gives them back."""
    import random

    import torch

    from nlptasks.serve import memory

    def rss_mb() -> float:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024

    def batches_of_many_shapes() -> None:  # on another thread, as the model's worker thread does
        rng, kept = random.Random(0), []
        for _ in range(300):
            kept.append(torch.ones(rng.randint(50_000, 2_000_000)))
            if len(kept) > 20:
                kept.pop(rng.randrange(len(kept)))

    worker = threading.Thread(target=batches_of_many_shapes)
    worker.start()
    worker.join()
    before = rss_mb()
    if not memory.release_freed_memory():
        pytest.skip("not glibc: no malloc_trim")
    assert rss_mb() < before - 20
    trimmer = memory.Trimmer(every_s=3600)
    trimmer.last -= 3600
    trimmer()  # an hour since the last: it trims now
    trimmed = trimmer.last
    trimmer()  # within the hour: not again
    assert trimmer.last == trimmed > time.monotonic() - 60
