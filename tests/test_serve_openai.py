"""``nlptasks serve``'s OpenAI-compatible endpoints, through the official ``openai`` client against
the real server (uvicorn on a free loopback port), with a tiny sft run and a tiny cls run.

A greedy chat equals what the run's predictor answers for the same prompt (``nlptasks infer``),
streamed pieces join to the non-streamed answer, and every refusal arrives as the client's own
exception carrying our message.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from conftest import QUESTION, build_app, running, serve_state

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def trained(served_run):
    return {"tiny-sft": served_run("sft"), "tiny-cls": served_run("cls")}


@pytest.fixture(scope="module")
def server(trained):
    state = serve_state(trained)
    with running(build_app(state)) as url:
        yield url, state


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="x", max_retries=0, timeout=120)


def test_the_predictors_chat_is_its_answer_in_pieces(server):
    """``Predictor.chat`` renders a conversation as ``__call__`` does: greedy, the joined pieces are
    the answer ``nlptasks infer`` prints, for one turn and for a chat row of several."""
    predictor = server[1].models["tiny-sft"].predictor
    info: dict = {}
    pieces = list(predictor.chat([{"role": "user", "content": QUESTION}], info=info))
    assert "".join(pieces) == predictor([QUESTION])[0]["response"]
    assert info["prompt_tokens"] > 0 and info["finish_reason"] in ("stop", "length")
    assert info["completion_tokens"] >= len([p for p in pieces if p]) - 1
    turns = [
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "您好！"},
        {"role": "user", "content": QUESTION},
    ]
    assert "".join(predictor.chat(turns, temperature=0)) == predictor([{"messages": turns}])[0]["response"]


def test_models_lists_the_served_runs(client):
    assert {m.id for m in client.models.list()} == {"tiny-sft", "tiny-cls"}
    one = client.models.retrieve("tiny-cls")
    assert one.id == "tiny-cls" and one.object == "model" and one.owned_by == "nlptasks"
    assert one.model_dump()["task"] == "cls" and one.model_dump()["can_chat"] is False
    with pytest.raises(openai.NotFoundError, match=r"no model 'nope' is served here; served: tiny-sft, tiny-cls"):
        client.models.retrieve("nope")


def test_chat_equals_the_predictor_and_streaming_joins_to_it(client, server):
    predictor = server[1].models["tiny-sft"].predictor
    expected = predictor([QUESTION])[0]["response"]
    answer = client.chat.completions.create(model="tiny-sft", messages=[{"role": "user", "content": QUESTION}])
    assert answer.object == "chat.completion" and answer.model == "tiny-sft" and answer.id.startswith("chatcmpl-")
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == expected
    assert choice.finish_reason in ("stop", "length")
    assert answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens

    chunks = list(
        client.chat.completions.create(
            model="tiny-sft",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == expected
    assert [c.choices[0].finish_reason for c in with_choices][-1] == choice.finish_reason
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert len(with_choices) > 3  # pieces, not one blob
    assert chunks[-1].usage.completion_tokens == answer.usage.completion_tokens


def test_settings_are_honoured(client, server):
    one = client.chat.completions.create(
        model="tiny-sft", messages=[{"role": "user", "content": QUESTION}], max_tokens=2, temperature=0
    )
    assert one.choices[0].finish_reason == "length" and one.usage.completion_tokens == 2
    full = client.chat.completions.create(model="tiny-sft", messages=[{"role": "user", "content": QUESTION}])
    text = full.choices[0].message.content
    if len(text) > 4:  # a stop string cuts the reply before it
        cut = client.chat.completions.create(
            model="tiny-sft", messages=[{"role": "user", "content": QUESTION}], stop=[text[2:4]]
        )
        assert cut.choices[0].finish_reason == "stop" and text.startswith(cut.choices[0].message.content)
        assert text[2:4] not in cut.choices[0].message.content
    sampled = client.chat.completions.create(
        model="tiny-sft",
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0.8,
        top_p=0.9,
        max_completion_tokens=8,
    )
    assert sampled.usage.completion_tokens <= 8


def test_a_seed_makes_sampling_repeatable(client):
    """`seed` is honoured: sampling with the same seed gives the same reply, other seeds others,
    and a seed that is not an integer is refused naming the field."""

    def ask(seed: int) -> str:
        answer = client.chat.completions.create(
            model="tiny-sft",
            messages=[{"role": "user", "content": QUESTION}],
            temperature=1.5,
            max_tokens=12,
            seed=seed,
        )
        return answer.choices[0].message.content

    first = ask(7)
    assert ask(7) == first
    assert len({first, ask(1), ask(2), ask(3)}) > 1
    with pytest.raises(openai.BadRequestError, match=r"seed: must be an integer"):
        client.chat.completions.create(
            model="tiny-sft", messages=[{"role": "user", "content": QUESTION}], extra_body={"seed": 1.5}
        )


def test_completions_send_the_prompt_as_one_user_message(client, server):
    expected = server[1].models["tiny-sft"].predictor([QUESTION])[0]["response"]
    answer = client.completions.create(model="tiny-sft", prompt=QUESTION)
    assert answer.object == "text_completion" and answer.choices[0].text == expected
    streamed = list(client.completions.create(model="tiny-sft", prompt=QUESTION, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == expected
    assert streamed[-1].choices[0].finish_reason == answer.choices[0].finish_reason


def test_refusals_name_the_model_or_the_field(client):
    with pytest.raises(openai.BadRequestError, match=r"'tiny-cls' is a cls run .*/v1/predict/tiny-cls"):
        client.chat.completions.create(model="tiny-cls", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match=r"no model 'nope' is served here; served: tiny-sft, tiny-cls"):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match=r"n: only n=1 is supported \(got 2\)"):
        client.chat.completions.create(model="tiny-sft", messages=[{"role": "user", "content": "hi"}], n=2)
    with pytest.raises(openai.BadRequestError, match=r"temperature: must be a number from 0 to 2"):
        client.chat.completions.create(model="tiny-sft", messages=[{"role": "user", "content": "hi"}], temperature=5)
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\].role: 'tool' is not supported"):
        client.chat.completions.create(
            model="tiny-sft", messages=[{"role": "tool", "content": "hi", "tool_call_id": "1"}]
        )
    with pytest.raises(openai.BadRequestError, match=r"messages: .*no user turn"):  # from the predictor
        client.chat.completions.create(model="tiny-sft", messages=[{"role": "system", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match=r"max_tokens: must be an integer"):
        client.completions.create(model="tiny-sft", prompt="hi", max_tokens=0)


def test_raw_http_errors_and_events(server):
    import httpx

    url = server[0]
    r = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", timeout=120)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny-sft"}, timeout=120)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    body = {"model": "tiny-sft", "messages": [{"role": "user", "content": QUESTION}], "stream": True, "max_tokens": 4}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    first = json.loads(lines[0][6:])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_a_client_that_leaves_mid_stream_stops_its_generation(server, client):
    """The generation stops at the next token, and the model answers the next request at once."""
    import httpx

    url, state = server
    served = state.models["tiny-sft"]
    info = {}
    "".join(served.predictor.chat([{"role": "user", "content": QUESTION}], max_new_tokens=400, info=info))
    if info["completion_tokens"] < 100:
        pytest.skip("the tiny model ends this reply by itself too soon to leave in the middle")
    calls = []
    original = served.predictor.chat

    def counting(messages, **kwargs):
        pieces = original(messages, **kwargs)

        def gen():
            try:
                for piece in pieces:
                    calls.append(piece)
                    time.sleep(0.05)  # slow enough that leaving early matters
                    yield piece
                calls.append("END")  # never reached when the client leaves
            finally:
                pieces.close()
                calls.append(None)

        return gen()

    served.predictor.chat = counting
    try:
        body = {
            "model": "tiny-sft",
            "messages": [{"role": "user", "content": QUESTION}],
            "stream": True,
            "max_tokens": 400,
        }
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i >= 3:
                    break
        deadline = time.monotonic() + 120  # generous: a stream left running ends its 400 pieces (20 s) with "END"
        while None not in calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert None in calls and "END" not in calls and len(calls) < 100, len(calls)  # long before 400 tokens
    finally:
        del served.predictor.chat
    quick = client.chat.completions.create(
        model="tiny-sft", messages=[{"role": "user", "content": QUESTION}], max_tokens=2
    )
    assert quick.usage.completion_tokens == 2


def test_concurrent_chats_each_get_their_own_answer(server):
    import httpx

    url, state = server
    prompts = [QUESTION, "老街民宿在哪里？", "重复下面这句话。"]
    expected = [r["response"] for r in state.models["tiny-sft"].predictor(prompts)]

    async def ask(http, prompt, stream):
        body = {"model": "tiny-sft", "messages": [{"role": "user", "content": prompt}], "stream": stream}
        if not stream:
            r = await http.post(f"{url}/v1/chat/completions", json=body)
            return r.json()["choices"][0]["message"]["content"]
        text = ""
        async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    text += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        return text

    async def main():
        async with httpx.AsyncClient(timeout=120) as http:
            return await asyncio.gather(*(ask(http, p, i % 2 == 0) for i, p in enumerate(prompts)))

    assert asyncio.run(main()) == expected


def test_a_wrong_api_key_is_refused(trained):
    state = serve_state({"tiny-sft": trained["tiny-sft"]}, api_key="secret")
    with running(build_app(state)) as url:
        wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model="tiny-sft", messages=[{"role": "user", "content": "hi"}])
        right = openai.OpenAI(base_url=f"{url}/v1", api_key="secret", max_retries=0, timeout=120)
        answer = right.chat.completions.create(
            model="tiny-sft", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert answer.usage.completion_tokens <= 3


def _solo(predictor, messages, **settings) -> tuple[str, dict]:
    info: dict = {}
    return "".join(predictor.chat(messages, info=info, **settings)), info


def test_chat_batch_gives_each_conversation_its_own_reply(server):
    """``Predictor.chat_batch``: conversations generated together (left-padded, one generate per
    sampling setting) get, greedy, exactly the reply and usage ``chat`` gives each alone, with their
    own max_new_tokens and stop strings; an invalid one is an error event that the others do not
    notice; a cancelled one ends while the others go on."""
    predictor = server[1].models["tiny-sft"].predictor
    user = lambda text: [{"role": "user", "content": text}]  # noqa: E731
    long_reply, _ = _solo(predictor, user(QUESTION), max_new_tokens=40)
    stop = long_reply[len(long_reply) // 2 : len(long_reply) // 2 + 2].strip() or None
    calls = [
        {"messages": user(QUESTION), "max_new_tokens": 40},
        {"messages": user("老街民宿在哪里？"), "max_new_tokens": 3},
        {"messages": "not a conversation"},
        {"messages": user(QUESTION), "max_new_tokens": 40, "stop": [stop] if stop else None},
        {"messages": user("重复下面这句话。"), "max_new_tokens": 40, "temperature": 0.8, "top_p": 0.9},
        {"messages": user("重复下面这句话。"), "max_new_tokens": 40},
    ]
    for call in calls:
        call["info"] = {}
    texts, kinds = {i: "" for i in range(len(calls))}, {i: [] for i in range(len(calls))}
    for index, kind, value in predictor.chat_batch(calls):
        kinds[index].append(kind)
        if kind == "piece":
            texts[index] += value
    assert kinds[2] == ["error"]
    for index, call in enumerate(calls):
        if index == 2:
            continue
        assert kinds[index][0] == "ready" and kinds[index][-1] == "end" and kinds[index].count("end") == 1
        if call.get("temperature"):
            continue  # sampled: its own random draw
        settings = {k: call[k] for k in ("max_new_tokens", "stop") if call.get(k)}
        text, info = _solo(predictor, call["messages"], **settings)
        assert texts[index] == text, index
        assert call["info"] == info, index
    assert calls[1]["info"]["completion_tokens"] <= 3

    seen = []
    cancel = {"messages": user(QUESTION), "max_new_tokens": 40, "cancelled": lambda: len(seen) >= 2}
    other = {"messages": user("重复下面这句话。"), "max_new_tokens": 40, "info": {}}
    done = ""
    for index, kind, value in predictor.chat_batch([cancel, other]):
        if index == 0 and kind == "piece":
            seen.append(value)
        if index == 1 and kind == "piece":
            done += value
    assert len(seen) == 2
    assert done == _solo(predictor, other["messages"], max_new_tokens=40)[0]


def test_chats_that_wait_are_generated_together(server):
    """Requests that arrive while the model is busy are answered in one batch (``chat_batch``), each
    with exactly the reply it gets alone; a seeded sampling request is never batched."""
    import concurrent.futures
    import threading

    import httpx

    url, state = server
    served = state.models["tiny-sft"]
    real = served.predictor.chat_batch
    sizes = []

    def spy(calls):  # the real method, counted
        sizes.append(len(calls))
        return real(calls)

    prompts = [(QUESTION, 20), ("老街民宿在哪里？", 6), ("重复下面这句话。", 20), (QUESTION, 3)]
    expected = [_solo(served.predictor, [{"role": "user", "content": p}], max_new_tokens=n)[0] for p, n in prompts]
    served.predictor.chat_batch = spy
    gate = threading.Event()
    try:
        busy = served.executor.submit(gate.wait, 60)  # the model's worker thread is busy: requests queue

        def ask(prompt, tokens, seed=None):
            body = {"model": "tiny-sft", "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens}
            if seed is not None:
                body.update(temperature=0.9, seed=seed)
            r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"]

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(ask, p, n) for p, n in prompts]
            seeded = pool.submit(ask, QUESTION, 10, 7)
            deadline = time.monotonic() + 30
            while len(served.chat_queue.pending) < len(prompts) + 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            gate.set()
            answers = [f.result() for f in futures]
            seeded.result()
        busy.result()
    finally:
        gate.set()
        del served.predictor.chat_batch
    assert answers == expected
    assert sizes == [len(prompts)]  # one batch of the four greedy requests; the seeded one alone
