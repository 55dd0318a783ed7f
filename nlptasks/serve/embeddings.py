"""OpenAI-compatible ``POST /v1/embeddings``, for every served run whose predictor embeds texts
(``Predictor.embed``, see :class:`nlptasks.types.Predictor`: the pair task's bi-encoder runs, or
any plugin's); the route never names a task.

The vectors are the predictor's own (what ``nlptasks infer``'s similarities are computed from),
computed on the model's worker thread, and sent as lists of floats (``encoding_format:
"float"``) or as base64 of little-endian float32 (``"base64"``, what the ``openai`` client asks
for by default and decodes itself).  ``usage.prompt_tokens`` counts the inputs' tokens with the
run's tokenizer where the predictor has one.

(No ``from __future__ import annotations`` here: FastAPI reads the route's annotations.)
"""

import base64
import json
from typing import Any

from nlptasks.serve.errors import ApiError
from nlptasks.serve.state import ServedModel, ServerState

__all__ = ["add_routes", "parse_embeddings"]

_FORMATS = ("float", "base64")


def parse_embeddings(body: Any, max_inputs: int) -> tuple[str, list[str], str, int | None]:
    """``(model, texts, encoding_format, dimensions)`` of a request body, checked (an
    :class:`~nlptasks.serve.errors.ApiError` naming the field if not)."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body: must be a JSON object with model and input", "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model: required, the name of a served model (GET /v1/models lists them)", "model")
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts:
        raise ApiError(400, "input: required, a text or a non-empty list of texts", "input")
    if len(texts) > max_inputs:
        raise ApiError(
            400, f"input: {len(texts)} texts, more than the limit of {max_inputs} per request (--max-inputs)", "input"
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            kind = "token ids" if isinstance(text, int) or isinstance(text, list) else type(text).__name__
            raise ApiError(400, f"input[{i}]: {kind} are not supported; send texts", "input")
        if not text.strip():
            raise ApiError(400, f"input[{i}]: an empty text has no embedding", "input")
    fmt = body.get("encoding_format") or "float"
    if fmt not in _FORMATS:
        raise ApiError(
            400, f"encoding_format: {fmt!r} is not supported (use one of: {', '.join(_FORMATS)})", "encoding_format"
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)):
        raise ApiError(400, f"dimensions: must be an integer (got {json.dumps(dimensions)})", "dimensions")
    return model, texts, fmt, dimensions


def _encode(vector: Any, fmt: str) -> Any:
    import numpy as np

    array = np.asarray(vector, dtype="<f4")
    return base64.b64encode(array.tobytes()).decode("ascii") if fmt == "base64" else array.tolist()


def _embed(served: ServedModel, texts: list[str]) -> tuple[Any, int]:  # on the model's worker thread
    vectors = served.predictor.embed(texts)
    tokenizer = getattr(served.predictor, "tokenizer", None)
    tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"]) if tokenizer is not None else 0
    return vectors, tokens


def add_routes(app: Any, state: ServerState) -> None:
    """Add ``POST /v1/embeddings`` to ``app`` (the app's key check and body limit cover it)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    schema = {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string"},
            "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "encoding_format": {"type": "string", "enum": list(_FORMATS)},
            "dimensions": {"type": "integer"},
        },
    }

    @app.post(
        "/v1/embeddings",
        tags=["OpenAI-compatible"],
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}},
        summary="Embeddings of texts from a run that embeds (OpenAI's shape)",
    )
    async def embeddings(request: Request) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise ApiError(400, f"request body: not valid JSON ({exc})", "body") from None
        name, texts, fmt, dimensions = parse_embeddings(body, state.settings.max_inputs)
        served = state.served(name, ability="embed")
        vectors, tokens = await served.call(_embed, served, texts)
        width = len(vectors[0])
        if dimensions is not None and dimensions != width:
            raise ApiError(
                400, f"dimensions: this model's embeddings have {width} dimensions (got {dimensions})", "dimensions"
            )
        data = [{"object": "embedding", "index": i, "embedding": _encode(v, fmt)} for i, v in enumerate(vectors)]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": name, "usage": usage})
