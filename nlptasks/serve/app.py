"""The server's FastAPI app: :func:`create_app`.

Routes of this module (the OpenAI-compatible ones come from :mod:`nlptasks.serve.openai` and
:mod:`nlptasks.serve.embeddings`, the page at ``/`` from :mod:`nlptasks.serve.page`):

``POST /v1/predict/{name}``  ``{"inputs": [...]}`` → ``{"outputs": [...]}``: one dict per input,
    in order, exactly what ``nlptasks infer`` prints for the same inputs (dynamically batched with
    other requests: :mod:`nlptasks.serve.batching`);
``GET /v1/models``  the served models, OpenAI-style (``{"object": "list", "data": [...]}``);
``GET /v1/models/{name}``  one of them;
``GET /health``  ``{"status": "ok", "models": [...]}``, without the API key;
``GET /metrics``  the counters in Prometheus' text format (:mod:`nlptasks.serve.metrics`);
``GET /docs``  FastAPI's OpenAPI page (``/openapi.json``: the schema).

Every error has one JSON shape naming the field at fault (:mod:`nlptasks.serve.errors`); the
server never dies from a request: an exception in a predictor is a 500 with one line, and its
traceback goes to the log.

(No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations, and those
name classes imported inside :func:`create_app`.)
"""

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.errors import DataError, NlptasksError, first_line
from nlptasks.serve.batching import Batcher
from nlptasks.serve.errors import ApiError, add_error_handlers
from nlptasks.serve.guards import ApiKeyMiddleware, BodyGuardMiddleware
from nlptasks.serve.metrics import CONTENT_TYPE, Metrics, MetricsMiddleware
from nlptasks.serve.state import ServedModel, ServerState

__all__ = ["PredictRequest", "PredictResponse", "create_app", "predict"]

log = logging.getLogger("nlptasks.serve")

INPUTS_HELP = (
    "The inputs, as `nlptasks infer` and `nlptasks.load(run)` take them: texts, or objects with the "
    'task\'s fields (the columns of its data, e.g. {"text_a": ..., "text_b": ...} for a pair), or '
    "a list of the field texts of one input; a text may also hold the fields separated by TABs."
)


class PredictRequest(BaseModel):
    """The body of ``POST /v1/predict/{name}``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"inputs": ["a text", "another"]}]})
    inputs: list[str | dict[str, Any] | list[str]] = Field(min_length=1, description=INPUTS_HELP)


class PredictResponse(BaseModel):
    """The answer of ``POST /v1/predict/{name}``."""

    outputs: list[dict[str, Any]] = Field(
        description="One object per input, in order: what `nlptasks infer` prints for it."
    )


def create_app(state: ServerState) -> Any:
    """The app serving ``state.models`` with ``state.settings`` (needs the ``serve`` extra:
    ``pip install "nlptasks[serve]"``)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse

    from nlptasks.version import __version__

    if state.metrics is None:
        state.metrics = Metrics()
    for served in state.models.values():
        served.batcher = Batcher(served, state.settings, state.metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        for served in state.models.values():
            served.batcher.start()
        yield
        for served in state.models.values():
            await served.batcher.stop()

    app = FastAPI(title="nlptasks serve", version=__version__, lifespan=lifespan, description=_description(state))

    errors = {
        code: {"description": text}
        for code, text in (
            (400, "the request cannot be served as sent (the message names the field)"),
            (401, "missing or wrong API key"),
            (404, "no model of that name is served"),
            (408, "the body did not arrive in time (--body-timeout)"),
            (413, "the body is too large"),
            (503, "the queue is full: try again after Retry-After seconds"),
            (504, "no answer within the timeout"),
        )
    }

    @app.post(
        "/v1/predict/{name}",
        response_model=PredictResponse,
        responses=errors,
        tags=["predict"],
        summary="Predict with a served run",
    )
    async def predict_route(name: str, body: PredictRequest, request: Request) -> Any:
        """One object per input, in order: exactly what `nlptasks infer` prints for the same inputs."""
        served = state.served(name, "name")
        if len(body.inputs) > state.settings.max_inputs:
            raise ApiError(
                400,
                f"inputs: {len(body.inputs)} inputs, more than the limit of "
                f"{state.settings.max_inputs} per request (--max-inputs); split them into several "
                "requests",
                "inputs",
            )
        outputs = await predict(served, body.inputs, request)
        return JSONResponse({"outputs": outputs})

    @app.get("/v1/models", tags=["models"], summary="The served models (OpenAI's list shape)")
    async def models_route() -> Any:
        return {"object": "list", "data": [_model_card(s) for s in state.models.values()]}

    @app.get("/v1/models/{name}", tags=["models"], responses=errors, summary="One served model (OpenAI's model shape)")
    async def model_route(name: str) -> Any:
        return _model_card(state.served(name, "name"))

    @app.get("/health", tags=["server"], summary="Whether the server is up (no API key needed)")
    async def health_route() -> Any:
        return {"status": "ok", "models": list(state.models), "worker": os.getpid()}

    @app.get(
        "/metrics",
        tags=["server"],
        response_class=PlainTextResponse,
        summary="Requests, batch sizes, latency quantiles and queue lengths (Prometheus text format)",
    )
    async def metrics_route() -> Any:
        return PlainTextResponse(state.metrics.render(state), media_type=CONTENT_TYPE)

    add_error_handlers(app)  # ApiError, invalid requests and unknown routes as the API's one error body

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Any:  # pragma: no cover - a last resort
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse(_one_line_500(exc), status_code=500)

    from nlptasks.serve import embeddings, openai, page

    openai.add_routes(app, state)
    embeddings.add_routes(app, state)
    page.add_routes(app, state)

    app.add_middleware(
        BodyGuardMiddleware, limit=state.settings.max_body_bytes, read_timeout=state.settings.body_timeout_s
    )
    if state.settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=state.settings.api_key)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics, models=state.models)
    if state.settings.api_key:
        _document_bearer(app)
    return app


async def predict(served: ServedModel, inputs: list[Any], request: Any = None) -> list[dict[str, Any]]:
    """``served``'s outputs for ``inputs`` through its batcher, as an HTTP answer would give them.

    A client that goes away (``request``'s ``http.disconnect``) takes its inputs out of the queue.

    :raises ApiError: 400 for inputs the task cannot read (naming ``inputs[i]``), 500 for any
        other failure of the predictor (its traceback logged), 499 for a client gone, the
        batcher's 503/504.
    """
    work = asyncio.ensure_future(served.batcher.predict(inputs))
    gone = asyncio.ensure_future(_disconnected(request)) if request is not None else None
    try:
        await asyncio.wait({work} | ({gone} if gone else set()), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        work.cancel()
        raise
    finally:
        if gone is not None:
            gone.cancel()
    if not work.done():
        work.cancel()
        raise ApiError(499, "the client closed the request")
    try:
        return work.result()
    except ApiError:
        raise
    except DataError as exc:
        raise _input_error(exc) from None
    except NlptasksError as exc:
        raise ApiError(400, first_line(exc), "inputs") from None
    except Exception as exc:
        log.error("model %r failed on a request of %d inputs", served.name, len(inputs), exc_info=exc)
        raise ApiError(500, _one_line_500(exc)["error"]["message"]) from None


async def _disconnected(request: Any) -> None:
    """Return when the client has gone (the body is read by then: what follows is the disconnect)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


def _input_error(exc: DataError) -> ApiError:
    """A predictor's :class:`DataError` as a 400 naming the input (``row`` N is ``inputs[N-1]``)."""
    message = exc.message
    field = "inputs"
    if exc.row is not None and not exc.path:
        field = f"inputs[{exc.row - 1}]"
        if exc.field:
            field += exc.field if exc.field.startswith("[") else f".{exc.field}"
        message = f"{field}: {message.removeprefix(f'row {exc.row}: ')}"
    else:
        message = f"inputs: {message}"
    if exc.hint:
        message += f" ({exc.hint})"
    return ApiError(400, message, field)


def _one_line_500(exc: BaseException) -> dict[str, Any]:
    from nlptasks.serve.errors import error_body

    return error_body(
        500,
        f"the server failed on this request: {type(exc).__name__}: {first_line(exc)} "
        "(the server's log has the traceback)",
    )


def _model_card(served: ServedModel) -> dict[str, Any]:
    complete = served.run_dir / "COMPLETE"
    created = int(complete.stat().st_mtime) if complete.exists() else 0
    return {
        "id": served.name,
        "object": "model",
        "created": created,
        "owned_by": "nlptasks",
        "task": served.task,
        "can_chat": served.can_chat,
        "can_embed": served.can_embed,
    }


def _description(state: ServerState) -> str:
    models = ", ".join(f"`{name}` ({s.task})" for name, s in state.models.items()) or "none"
    auth = (
        " Every route but `/health`, `/` and this page needs `Authorization: Bearer KEY` (the *Authorize* "
        "button sets it)."
        if state.settings.api_key
        else ""
    )
    return (
        f"Trained nlptasks runs behind HTTP. Served models: {models}. `POST /v1/predict/{{name}}` with "
        f'`{{"inputs": [...]}}` answers what `nlptasks infer` prints, one object per input.{auth}'
    )


def _document_bearer(app: Any) -> None:
    """Tell the OpenAPI schema (and the /docs page's *Authorize* button) about the bearer key."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            for path, operations in schema.get("paths", {}).items():
                if not ApiKeyMiddleware.is_public(path):
                    for operation in operations.values():
                        operation["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
