"""The dashboard's FastAPI app: :func:`create_app`.

The page at ``/`` (``nlptasks/ui/static``) and its JSON API under ``/api`` (the routes of
:mod:`nlptasks.ui.routes`).  With an API key every ``/api`` route needs ``Authorization: Bearer
KEY`` (the page and its files do not: a browser cannot send a key when it opens a page, and the
page asks for it).  Every error is ``nlptasks serve``'s JSON shape with the field at fault
(:mod:`nlptasks.serve.errors`); a run folder deleted or damaged while a page looks at it is a 404
or a message, never a 500.

(No ``from __future__ import annotations``: FastAPI reads the routes' annotations.)
"""

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from nlptasks.errors import first_line
from nlptasks.serve.errors import add_error_handlers, error_response
from nlptasks.serve.guards import ApiKeyMiddleware, BodyGuardMiddleware
from nlptasks.ui.state import UiState

__all__ = ["STATIC", "create_app"]

log = logging.getLogger("nlptasks.ui")

STATIC = Path(__file__).with_name("static")
"""The page's files (HTML, JavaScript, CSS), shipped as package data."""


def create_app(state: UiState) -> Any:
    """The dashboard for ``state`` (needs the ``serve`` extra: ``pip install "nlptasks[serve]"``)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles

    from nlptasks.ui import routes
    from nlptasks.version import __version__

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        state.jobs.start()
        yield
        state.close()

    app = FastAPI(
        title="nlptasks ui",
        version=__version__,
        lifespan=lifespan,
        description="The runs under "
        + ", ".join(f"`{p}`" for p in state.roots.runs)
        + ": list, compare, watch, start, stop, resume, try. docs/ui.md describes the page.",
    )
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> Any:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"), headers={"Cache-Control": "no-cache"})

    routes.add_routes(app, state)

    add_error_handlers(app)  # ApiError, invalid requests and unknown routes as the API's one error body

    @app.exception_handler(FileNotFoundError)
    async def gone(request: Request, exc: FileNotFoundError) -> Any:
        # a run folder removed while it was read: what the page shows for a deleted run
        return error_response(
            404, f"{exc.filename or 'a file'} is gone (deleted while it was read?): {first_line(exc)}"
        )

    @app.exception_handler(OSError)
    async def unreadable(request: Request, exc: OSError) -> Any:
        return error_response(409, f"{exc.filename or 'a file'} cannot be read: {exc.strerror or first_line(exc)}")

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Any:  # pragma: no cover - a last resort
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            {
                "error": {
                    "message": f"the dashboard failed on this request: {type(exc).__name__}: {first_line(exc)} "
                    "(its log has the traceback)",
                    "type": "server_error",
                    "field": None,
                    "param": None,
                    "code": 500,
                }
            },
            status_code=500,
        )

    app.add_middleware(BodyGuardMiddleware, limit=state.settings.max_body_bytes)
    if state.settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=state.settings.api_key)
    return app
