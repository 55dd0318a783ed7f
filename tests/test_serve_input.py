"""What ``nlptasks serve`` refuses at its HTTP edge, over real HTTP (uvicorn on a free loopback port)
against tiny cls, ner and sft runs: values that are not texts (never turned into ``"5"`` or
``""``), lone surrogates, bodies that are not UTF-8, not JSON or nested too deep, bodies that never
finish arriving, and clients that leave mid-body (counted as 499 in ``/metrics``, not as 500).

Malformed bodies go through raw sockets: an HTTP client would not send them.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from conftest import build_app, running

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

BODY_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def server(served_run):
    from nlptasks.serve.models import load_models
    from nlptasks.serve.state import ServerState, ServeSettings

    runs = {f"tiny-{task}": served_run(task) for task in ("cls", "ner", "sft")}
    state = ServerState(
        models=load_models(list(runs.values()), list(runs)), settings=ServeSettings(body_timeout_s=BODY_TIMEOUT)
    )
    with running(build_app(state)) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server, timeout=120) as c:
        yield c


def post(client, path: str, body: str | bytes, content_type: str | None = "application/json"):
    headers = {"content-type": content_type} if content_type else {}
    return client.post(path, content=body.encode("utf-8") if isinstance(body, str) else body, headers=headers)


def refused(response, field: str, *words: str) -> str:
    """Assert a 400 naming ``field``, its message holding ``words``; return the message."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    for word in words:
        assert word in error["message"], error
    return error["message"]


def raw(server: str, request: bytes, wait: float = 30.0, close_after: float | None = None) -> tuple[float, bytes]:
    """Send ``request`` bytes on a new connection; ``(seconds, bytes)`` until the server closes it or
    answers in full (or the client closes after ``close_after`` s, then ``b""``)."""
    host, port = server.removeprefix("http://").split(":")
    start = time.monotonic()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(request)
        if close_after is not None:
            time.sleep(close_after)
            return time.monotonic() - start, b""
        sock.settimeout(wait)
        data = b""
        while True:
            try:
                piece = sock.recv(65536)
            except TimeoutError:
                break
            if not piece:
                break
            data += piece
    return time.monotonic() - start, data


def head(path: str, length: int | str, content_type: str = "application/json", extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


def requests_total(client) -> dict[tuple[str, str], int]:
    """``(endpoint, status) -> count`` from ``/metrics``."""
    out: dict[tuple[str, str], int] = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("nlptasks_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = (labels["endpoint"], labels["status"])
            out[key] = out.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


# -- class 4: nothing is turned into a text --------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "field", "words"),
    [
        ([{"text": 5}], "inputs[0].text", ["number", '"5"']),
        ([{"text": None}], "inputs[0].text", ["null"]),
        ([{"text": True}], "inputs[0].text", ["true/false"]),
        ([{"text": ["a"]}], "inputs[0].text", ["a list"]),
        (["fine", {"text": {"a": 1}}], "inputs[1].text", ["an object"]),
        ([1], "inputs[0]", ["got a number"]),
        ([True], "inputs[0]", ["got true"]),
        ([None], "inputs[0]", ["got null"]),
        ([["a", ["b"]]], "inputs[0]", []),
    ],
)
def test_predict_refuses_values_that_are_not_texts(client, inputs, field, words):
    refused(client.post("/v1/predict/tiny-cls", json={"inputs": inputs}), field, *words)


def test_a_misnamed_inputs_field_is_named(client):
    refused(client.post("/v1/predict/tiny-cls", json={"texts": [1]}), "inputs", "inputs: required", "texts: unknown")


def test_ner_tokens_must_be_texts(client):
    """``[小, 5, null]`` was the entity "小5None"; now each bad token is named."""
    refused(
        client.post("/v1/predict/tiny-ner", json={"inputs": [{"tokens": ["小", 5, None]}]}),
        "inputs[0].tokens[1]",
        "number",
    )
    refused(
        client.post("/v1/predict/tiny-ner", json={"inputs": [{"tokens": ["小", "明"]}, {"tokens": ["王", None]}]}),
        "inputs[1].tokens[1]",
        "null",
    )
    refused(client.post("/v1/predict/tiny-ner", json={"inputs": [{"tokens": "小明"}]}), "inputs[0].tokens", "list")
    ok = client.post("/v1/predict/tiny-ner", json={"inputs": [{"tokens": ["小", "明"]}]})
    assert ok.status_code == 200 and ok.json()["outputs"][0]["tokens"] == ["小", "明"]


def test_sft_fields_must_be_texts(client):
    refused(client.post("/v1/predict/tiny-sft", json={"inputs": [{"instruction": 5}]}), "inputs[0].instruction")
    refused(
        client.post("/v1/predict/tiny-sft", json={"inputs": [{"instruction": "hi", "input": False}]}),
        "inputs[0].input",
        "true/false",
    )


def test_chat_content_must_be_text(client):
    for content in (5, None, True, [{"type": "text", "text": 5}]):
        response = client.post(
            "/v1/chat/completions", json={"model": "tiny-sft", "messages": [{"role": "user", "content": content}]}
        )
        assert response.status_code == 400 and response.json()["error"]["field"] == "messages", response.text
        assert "messages[0].content" in response.json()["error"]["message"]


# -- class 5: lone surrogates, bytes, depth, Content-Type -----------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/predict/tiny-cls", r'{"inputs": ["\ud800"]}', "inputs[0]"),
        ("/v1/predict/tiny-cls", r'{"inputs": ["ok", {"text": "a\udfffb"}]}', "inputs[1].text"),
        ("/v1/predict/tiny-ner", r'{"inputs": [{"tokens": ["小", "\ud800"]}]}', "inputs[0].tokens[1]"),
        ("/v1/chat/completions", r'{"model": "tiny-sft", "messages": [{"role": "user", "content": "\ud800"}]}',
         "messages[0].content"),
        ("/v1/completions", r'{"model": "tiny-sft", "prompt": "hi \udc00"}', "prompt"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_a_400_naming_the_field(client, path, body, field):
    refused(post(client, path, body), field, "lone surrogate")


def test_a_surrogate_pair_is_text(client):
    response = post(client, "/v1/predict/tiny-cls", r'{"inputs": ["\ud83d\ude00 好"]}')
    assert response.status_code == 200, response.text


def test_invalid_utf8_names_the_byte(client):
    message = refused(post(client, "/v1/predict/tiny-cls", b'{"inputs": ["ok\xff"]}'), "body", "not UTF-8")
    assert "byte 15" in message and "0xff" in message


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_json_says_how_deep(client, depth):
    body = '{"inputs": [' + "[" * depth + "]" * depth + "]}"
    refused(post(client, "/v1/predict/tiny-cls", body), "body", "nested deeper than 64 levels")


def test_not_json_says_where(client):
    message = refused(post(client, "/v1/predict/tiny-cls", '{"inputs": ["a",]}'), "body", "not valid JSON")
    assert "line 1 column" in message
    refused(post(client, "/v1/chat/completions", '{"model": "tiny-sft", "temperature": NaN}'), "body", "NaN")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_json_is_json_whatever_its_content_type(client, content_type):
    response = post(client, "/v1/predict/tiny-cls", '{"inputs": ["好"]}', content_type)
    assert response.status_code == 200, response.text
    assert len(response.json()["outputs"]) == 1


def test_a_text_body_that_is_not_json_names_its_content_type(client):
    refused(post(client, "/v1/predict/tiny-cls", "好", "text/plain"), "body", "Content-Type: text/plain")


# -- class 5: bodies that never finish, clients that leave -----------------------------------------


def test_a_short_body_times_out_promptly(server, client):
    seconds, answer = raw(server, head("/v1/predict/tiny-cls", 100) + b'{"inputs": ["')
    assert seconds < BODY_TIMEOUT + 5, seconds
    assert answer.startswith(b"HTTP/1.1 408"), answer
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["field"] == "body" and "of the 100 its Content-Length declares" in error["message"]


def test_a_chunked_body_cut_off_times_out(server):
    request = (
        b"POST /v1/predict/tiny-cls HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"inp\r\n'
    )
    seconds, answer = raw(server, request)
    assert seconds < BODY_TIMEOUT + 5 and answer.startswith(b"HTTP/1.1 408"), (seconds, answer)


def test_a_huge_content_length_is_refused_at_once(server):
    seconds, answer = raw(server, head("/v1/predict/tiny-cls", 10**15) + b"{}")
    assert seconds < BODY_TIMEOUT and answer.startswith(b"HTTP/1.1 413"), (seconds, answer)


def test_a_client_leaving_mid_body_is_no_server_error(server, client):
    before = requests_total(client)
    for _ in range(2):
        raw(server, head("/v1/predict/tiny-cls", 100) + b'{"inp', close_after=0.2)
    deadline = time.monotonic() + 10
    while requests_total(client).get(("other", "499"), 0) < before.get(("other", "499"), 0) + 2:
        assert time.monotonic() < deadline, requests_total(client)
        time.sleep(0.1)
    after = requests_total(client)
    assert after.get(("other", "500"), 0) == before.get(("other", "500"), 0), after
