"""What every request passes before a route sees it: the API key, then its body (size, time, JSON).

Both are plain ASGI middleware, so they cover every route, those added by other modules too, and
answer in the server's error shape (:mod:`nlptasks.serve.errors`) before a route parses the body.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Iterable
from typing import Any

from nlptasks.serve.body import is_json_type, read_json
from nlptasks.serve.errors import ApiError, error_body

__all__ = ["PUBLIC_PATHS", "PUBLIC_PREFIXES", "ApiKeyMiddleware", "BodyGuardMiddleware", "bearer_token"]

PUBLIC_PATHS = frozenset({"/health", "/", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/favicon.ico"})
"""Paths open without the API key: health, the page's HTML, the OpenAPI page and its schema.  They
hold no model output; a browser cannot send an ``Authorization`` header when it opens a page, and
the page and ``/docs`` (its *Authorize* button) ask for the key to use in their requests."""
PUBLIC_PREFIXES = ("/static/",)
"""Path prefixes open without the key: the page's own files."""


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header ('' when there is none)."""
    for name, value in headers:
        if name.lower() == b"authorization":
            text = value.decode("latin-1").strip()
            if text[:7].lower() == "bearer ":
                return text[7:].strip()
    return ""


async def _send_error(
    send: Any, status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> None:
    import json

    body = json.dumps(error_body(status, message, field), ensure_ascii=False).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class ApiKeyMiddleware:
    """Every path but :data:`PUBLIC_PATHS` (and :data:`PUBLIC_PREFIXES`) needs
    ``Authorization: Bearer KEY``; without it: 401 with ``WWW-Authenticate: Bearer``."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.key = api_key.encode("utf-8")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.is_public(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope.get("headers") or ())
        if token and hmac.compare_digest(token.encode("utf-8"), self.key):
            await self.app(scope, receive, send)
            return
        said = "wrong API key" if token else "this server needs an API key"
        await _send_error(
            send,
            401,
            f"{said}: send the header 'Authorization: Bearer KEY' (the key the server "
            "was started with: --api-key or NLPTASKS_API_KEY)",
            "Authorization",
            {"WWW-Authenticate": "Bearer"},
        )

    @staticmethod
    def is_public(path: str) -> bool:
        return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class BodyGuardMiddleware:
    """A request's body, read whole and checked before any route reads it.

    * over ``limit`` bytes: 413 (a declared ``Content-Length`` over the limit at once, before
      reading);
    * no byte for ``read_timeout`` seconds while the body is incomplete (a ``Content-Length``
      larger than what the client sends, a chunked body cut off): 408, and the connection closes;
    * the client leaves mid-body: no answer (nobody to read it; ``/metrics`` counts a 499);
    * a non-empty body that is not JSON, not UTF-8, nested too deep, or holds a lone surrogate:
      400 naming what and where (:func:`nlptasks.serve.body.read_json`).  A body that parses as
      JSON is JSON whatever its ``Content-Type``: it is handed on as ``application/json``.

    The checked body is handed on to the route from memory.
    """

    def __init__(self, app: Any, limit: int, read_timeout: float = 10.0) -> None:
        self.app = app
        self.limit = limit
        self.read_timeout = read_timeout

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or ()
        declared = next((v for k, v in headers if k.lower() == b"content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            await self._refuse(send, int(declared))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout)
            except TimeoutError:
                await self._stalled(send, size, declared)
                return
            if message["type"] != "http.request":  # the client left before sending the body
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send, size, more=message.get("more_body", False))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body.strip():
            content_type = next((v for k, v in headers if k.lower() == b"content-type"), b"").decode("latin-1")
            try:
                read_json(body, content_type)
            except ApiError as exc:
                await _send_error(send, exc.status, exc.message, exc.field)
                return
            if not content_type or not is_json_type(content_type):  # JSON sent untyped, as text or a form
                kept = [(k, v) for k, v in headers if k.lower() != b"content-type"]
                scope = {**scope, "headers": [*kept, (b"content-type", b"application/json")]}
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then the real stream: its http.disconnect when the client leaves

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any, size: int, more: bool = False) -> None:
        got = f"more than {size:,}" if more else f"{size:,}"
        await _send_error(
            send,
            413,
            f"request body too large: {got} bytes, the limit is {self.limit:,} "
            "(--max-body-bytes); send fewer or shorter inputs per request",
            "body",
            {"Connection": "close"},
        )

    async def _stalled(self, send: Any, size: int, declared: bytes | None) -> None:
        of = f" of the {int(declared):,} its Content-Length declares" if declared and declared.isdigit() else ""
        await _send_error(
            send,
            408,
            f"request body: {size:,} bytes arrived{of}, then nothing for {self.read_timeout:g} s "
            "(--body-timeout); send the whole body, with a Content-Length that matches it",
            "body",
            {"Connection": "close"},
        )
