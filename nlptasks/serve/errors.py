"""The server's error answers: one JSON shape for every route, and FastAPI's validation errors
rewritten into a sentence that names the field.

Every error is ``{"error": {"message", "type", "field", "param", "code"}}`` with the HTTP status:
``message`` is one line saying what is wrong and what to send instead; ``field`` names the
request field at fault (``inputs``, ``inputs[3]``, ``body``) or is ``null``; ``param`` is the same
field under the name OpenAI's clients read; ``type`` is a stable word (``invalid_request_error``,
``authentication_error``, ``not_found_error``, ``request_too_large``, ``overloaded_error``,
``timeout_error``, ``server_error``); ``code`` is the HTTP status.

**400, not 422**: every request that cannot be served as sent (bad JSON, a wrong or missing field,
a wrong type, an empty or too long ``inputs`` list, an input the task cannot read) is answered
400, the code OpenAI's API (and so its clients: ``openai.BadRequestError``) uses for them.
FastAPI's own 422 never reaches a client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["KINDS", "ApiError", "add_error_handlers", "error_body", "error_response", "validation_problem"]

KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    499: "client_closed_request",
    500: "server_error",
    503: "overloaded_error",
    504: "timeout_error",
}
"""The ``type`` of an error by HTTP status (others: ``invalid_request_error`` below 500, else
``server_error``)."""


class ApiError(Exception):
    """An error the server answers: raise it from a route (the app turns it into the JSON body).

    :param status: the HTTP status.
    :param message: one line: what is wrong, and what to send instead.
    :param field: the request field at fault (``inputs[2]``), if one is.
    :param headers: extra response headers (``Retry-After``, ``WWW-Authenticate``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = dict(headers or {})
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.field, self.kind)


def error_body(status: int, message: str, field: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """The JSON body of an error answer (see the module's docstring)."""
    kind = kind or KINDS.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "field": field, "param": field, "code": status}}


def error_response(
    status: int,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    kind: str | None = None,
) -> Any:
    """A ``JSONResponse`` holding :func:`error_body`."""
    from starlette.responses import JSONResponse

    return JSONResponse(error_body(status, message, field, kind), status_code=status, headers=dict(headers or {}))


# -- FastAPI's validation errors, as one sentence -----------------------------------------------

EXAMPLE = '{"inputs": ["a text", ...]}'


def validation_problem(errors: Sequence[Mapping[str, Any]], fields: Sequence[str] = ("inputs",)) -> tuple[str, str]:
    """``(message, field)`` for the errors of ``RequestValidationError.errors()``.

    The errors are pydantic's, with ``loc`` starting at ``"body"``; a union of item types gives
    one error per member, collapsed here into one line per item.  ``fields`` are the body's field
    names (for "did you mean" on an unknown one).
    """
    lines: dict[str, str] = {}
    for error in sorted(errors, key=lambda e: e.get("type") != "missing"):  # a missing field first
        field, line = _one(error, fields)
        lines.setdefault(field, line)
    if not lines:
        return f"the request body is not valid; send {EXAMPLE}", "body"
    field = next(iter(lines))
    return "; ".join(lines.values()), field


def _one(error: Mapping[str, Any], fields: Sequence[str]) -> tuple[str, str]:
    kind = str(error.get("type", ""))
    loc = list(error.get("loc", ()))
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]
    got = error.get("input")
    if kind == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "")
        return "body", f"body: not valid JSON ({reason}); send {EXAMPLE} with Content-Type: application/json"
    if not loc:
        if kind == "missing":
            return "body", f"body: empty; send {EXAMPLE} with Content-Type: application/json"
        return "body", f"body: must be a JSON object like {EXAMPLE} (got {_kind(got)})"
    field = str(loc[0])
    index = next((p for p in loc[1:] if isinstance(p, int)), None)
    if index is not None:
        where = f"{field}[{index}]"
        return where, (
            f"{where}: must be a text, an object of the task's fields, or a list of field texts "
            f"(got {_kind(error.get('input'))})"
        )
    if kind == "missing":
        return field, f"{field}: required; send {EXAMPLE}"
    if kind == "extra_forbidden":
        from nlptasks.errors import did_you_mean

        return field, f"{field}: unknown field{did_you_mean(field, fields)}; the body has only {', '.join(fields)}"
    if kind == "list_type":
        return field, f"{field}: must be a list (got {_kind(got)}); send {EXAMPLE}"
    if kind == "too_short":
        return field, f"{field}: empty; give at least one input"
    return field, f"{field}: {error.get('msg', 'invalid')} (got {_kind(got)})"


def _kind(value: Any) -> str:
    """A short description of a JSON value: ``a string``, ``an object``, ``null`` ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (bytes, bytearray)):
        return "bytes that are not JSON"
    return type(value).__name__


def add_error_handlers(app: Any) -> None:
    """Answer an :class:`ApiError`, an invalid request and an unknown route or method on ``app`` (a
    FastAPI app: ``nlptasks serve``'s and ``nlptasks ui``'s) with the one error body of the API."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Any:
        return error_response(exc.status, exc.message, exc.field, exc.headers, exc.kind)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Any:
        message, field = validation_problem(exc.errors())
        return error_response(400, message, field)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Any:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}; the routes are listed at /docs"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; the routes are listed at /docs"
        return error_response(exc.status_code, message, headers=exc.headers)
