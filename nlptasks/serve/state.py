"""What every route of the server shares: the served models and the server's settings.

A :class:`ServedModel` is one run's predictor (step 10, exactly what ``nlptasks infer`` uses)
with the single worker thread that runs all of that model's work (batches, generations), so
requests to one model never run two forward passes at once and the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ServeSettings", "ServedModel", "ServerState"]


@dataclass
class ServeSettings:
    """The server's options (``nlptasks serve --help`` documents each)."""

    max_batch_size: int = 32
    max_wait_ms: float = 5.0
    max_queue: int = 256
    max_body_bytes: int = 1_000_000
    max_inputs: int = 256
    timeout_s: float = 60.0
    body_timeout_s: float = 10.0
    api_key: str | None = None


@dataclass
class ServedModel:
    """One served run.

    :param name: the name in URLs (``/v1/predict/{name}``) and in ``/v1/models``.
    :param run_dir: the run folder.
    :param manifest: its parsed ``nlptasks.json`` (``task``, ``labels``, ...).
    :param predictor: its step-10 predictor.
    """

    name: str
    run_dir: Path
    manifest: dict[str, Any]
    predictor: Any
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=1))
    batcher: Any = None  # nlptasks.serve.batching.Batcher, set by the app
    chat_queue: Any = None  # nlptasks.serve.openai._ChatQueue, set by the app for models that chat

    @property
    def task(self) -> str:
        return str(self.manifest.get("task", ""))

    @property
    def can_chat(self) -> bool:
        """Whether the predictor generates chat replies (``Predictor.chat``): OpenAI routes."""
        return callable(getattr(self.predictor, "chat", None))

    @property
    def can_embed(self) -> bool:
        """Whether the predictor gives text embeddings (``Predictor.embed``): ``/v1/embeddings``."""
        return callable(getattr(self.predictor, "embed", None))

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on this model's worker thread and wait for it without blocking the loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, lambda: fn(*args))


@dataclass
class ServerState:
    """The served models by name, the settings, and the counters of the metrics endpoint."""

    models: dict[str, ServedModel]
    settings: ServeSettings = field(default_factory=ServeSettings)
    metrics: Any = None  # nlptasks.serve.metrics.Metrics, set by the app

    def served(self, name: str, field_name: str = "model", ability: str | None = None) -> ServedModel:
        """The model served as ``name``; an :class:`~nlptasks.serve.errors.ApiError` 404 naming the
        served ones if there is none, and with ``ability`` (``"chat"``, ``"embed"``: a
        :class:`ServedModel` ``can_*`` property) a 400 saying where its predictions are if it cannot."""
        from nlptasks.serve.errors import ApiError

        served = self.models.get(name)
        if served is None:
            raise ApiError(
                404,
                f"no model {name!r} is served here; served: {', '.join(self.models) or 'none'} "
                "(GET /v1/models lists them)",
                field_name,
            )
        if ability is not None and not getattr(served, f"can_{ability}"):
            cannot = {"chat": "cannot chat", "embed": "gives no embeddings"}.get(ability, f"cannot {ability}")
            raise ApiError(
                400,
                f"model {name!r} is a {served.task or 'plugin'} run and {cannot}; "
                f"use POST /v1/predict/{name} for its predictions",
                field_name,
            )
        return served

    def close(self) -> None:
        """Stop every model's worker thread (after the server has stopped)."""
        for served in self.models.values():
            served.executor.shutdown(wait=False, cancel_futures=True)
