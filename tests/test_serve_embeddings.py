"""``nlptasks serve``'s ``POST /v1/embeddings`` through the official ``openai`` client against the
real server, with a tiny bi-encoder pair run (and a cls run, which has no embeddings).

The vectors are the predictor's own, in both encodings the client knows, and their cosine is the
similarity ``nlptasks infer`` prints for the pair."""

from __future__ import annotations

import base64

import pytest

from conftest import build_app, running, serve_state

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

TEXTS = ["酒店早餐几点开始", "早饭几点开始供应", "怎么开发票"]


@pytest.fixture(scope="module")
def server(served_run):
    state = serve_state({"tiny-bi": served_run("pair-bi"), "tiny-cls": served_run("cls")})
    with running(build_app(state)) as url:
        yield url, state


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="x", max_retries=0, timeout=120)


def test_embeddings_are_the_predictors_vectors_in_either_encoding(client, server):
    import numpy as np

    predictor = server[1].models["tiny-bi"].predictor
    expected = predictor.embed(TEXTS)
    for fmt in ("float", "base64"):  # asked for, base64 comes as the string (little-endian float32)
        answer = client.embeddings.create(model="tiny-bi", input=TEXTS, encoding_format=fmt)
        assert answer.object == "list" and answer.model == "tiny-bi"
        assert [d.index for d in answer.data] == [0, 1, 2]
        rows = [d.embedding for d in answer.data]
        if fmt == "base64":
            rows = [np.frombuffer(base64.b64decode(r), dtype="<f4") for r in rows]
        got = np.array(rows)
        assert got.shape == expected.shape and np.abs(got - expected).max() < 1e-6, fmt
        assert answer.usage.prompt_tokens == answer.usage.total_tokens > len(TEXTS)
    default = client.embeddings.create(model="tiny-bi", input=TEXTS)  # the client asks base64 and decodes
    assert np.abs(np.array([d.embedding for d in default.data]) - expected).max() < 1e-6
    one = client.embeddings.create(model="tiny-bi", input=TEXTS[0])  # one text, not a list
    assert len(one.data) == 1 and np.abs(np.array(one.data[0].embedding) - expected[0]).max() < 1e-6
    # the cosine of two is the similarity the predictor answers for the pair
    similarity = predictor([{"text_a": TEXTS[0], "text_b": TEXTS[1]}])[0]["similarity"]
    assert float(np.dot(expected[0], expected[1])) == pytest.approx(similarity, abs=1e-5)
    cards = {m.id: m.model_dump() for m in client.models.list()}
    assert cards["tiny-bi"]["can_embed"] is True and cards["tiny-cls"]["can_embed"] is False


def test_refusals_name_the_field_or_the_run(client):
    with pytest.raises(
        openai.BadRequestError, match=r"'tiny-cls' is a cls run and gives no embeddings.*/v1/predict/tiny-cls"
    ):
        client.embeddings.create(model="tiny-cls", input=TEXTS)
    with pytest.raises(openai.NotFoundError, match=r"no model 'nope' is served here; served: tiny-bi, tiny-cls"):
        client.embeddings.create(model="nope", input=TEXTS)
    with pytest.raises(openai.BadRequestError, match=r"input\[1\]: an empty text has no embedding"):
        client.embeddings.create(model="tiny-bi", input=["a", " "])
    with pytest.raises(openai.BadRequestError, match=r"input\[0\]: token ids are not supported; send texts"):
        client.embeddings.create(model="tiny-bi", input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match=r"dimensions: this model's embeddings have \d+ dimensions"):
        client.embeddings.create(model="tiny-bi", input=TEXTS, dimensions=3)
    with pytest.raises(openai.BadRequestError, match=r"input: required"):
        client.embeddings.create(model="tiny-bi", input=[])
