"""The page to try the served models, at ``/``.

Plain HTML, CSS and a little JavaScript from ``nlptasks/serve/static/`` (no build step, nothing
fetched from elsewhere): pick a served model, type a text (or one per field of the run's input,
two for a pair run), see the prediction drawn by its shape (a ``label`` with its score bars,
``entities`` with offsets highlighted in the text, a plain ``score``), or, for a model whose
predictor can chat, a chat that streams from ``/v1/chat/completions``.  The page never names a
task: what an input looks like comes from the run's manifest and its task's
:class:`~nlptasks.types.Usage` (``GET /ui/models``), and the output is drawn by its shape.

``/`` and ``/static/*`` are open (they hold no model output; a browser cannot send a key when it
opens a page); ``/ui/models`` and every request the page makes need the server's API key when it
has one, which the user types into the page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.serve.state import ServedModel, ServerState

__all__ = ["STATIC", "add_routes", "describe"]

STATIC = Path(__file__).with_name("static")
"""The page's files (``index.html``, ``app.js``, ``style.css``), shipped as package data."""


def describe(served: ServedModel) -> dict[str, Any]:
    """What the page needs to know of a served model: its name, task, whether it chats, the
    fields of one input (each with an example from the run's data), and its labels."""
    example = _example(served.manifest)
    names = _field_names(served.manifest, len(example))
    labels = served.manifest.get("labels")
    return {
        "name": served.name,
        "task": served.task,
        "chat": served.can_chat,
        "inputs": [{"name": n, "example": e} for n, e in zip(names, example, strict=True)],
        "labels": [str(x) for x in labels] if isinstance(labels, list) else None,
    }


def _example(manifest: dict[str, Any]) -> list[str]:
    """The run's example input, one string per field: its task's ``Usage`` (read through the
    plugin host, which loaded its predictor), else the manifest's ``example``."""
    try:
        from nlptasks.host import get_host

        example = get_host().task(str(manifest.get("task"))).usage_for(manifest).example
        if example and all(isinstance(x, str) for x in example):
            return list(example)
    except Exception:  # a task the host does not know: the manifest is enough
        pass
    raw = manifest.get("example")
    if isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        return list(raw)
    return [raw] if isinstance(raw, str) and raw else [""]


def _field_names(manifest: dict[str, Any], count: int) -> list[str]:
    """Names for the fields of an input: the run's ``*_column`` settings when there is one per
    field, else ``text`` (one field) or ``text 1``, ``text 2`` ..."""
    columns = [str(v) for k, v in manifest.items() if k.endswith("_column") and isinstance(v, str)]
    if len(columns) == count:
        return columns
    return ["text"] if count == 1 else [f"text {i}" for i in range(1, count + 1)]


def add_routes(app: Any, state: ServerState) -> None:
    """Add ``GET /`` (the page), ``/static/*`` (its files) and ``GET /ui/models`` to ``app``."""
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> Any:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"), headers={"Cache-Control": "no-cache"})

    @app.get("/ui/models", tags=["page"], summary="The served models as the page shows them")
    def ui_models() -> dict[str, Any]:
        """Each served model: ``name``, ``task``, ``chat`` (true: ``/v1/chat/completions`` serves
        it), ``inputs`` (the fields of one input, each with an ``example``) and ``labels``."""
        return {"models": [describe(served) for served in state.models.values()]}
