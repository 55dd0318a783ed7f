"""Complete runs loaded on demand for the *Try* page, a bounded number at a time.

A run loads the first time the page asks it for a prediction, through the loader of ``nlptasks
serve`` (:func:`nlptasks.serve.models.load_models`: ``nlptasks infer``'s own step 10, every choice
``auto``), and answers on its own worker thread.  At most ``max_loaded`` runs stay loaded
(``--max-loaded``, default 2): loading one more unloads the one used longest ago; a run unused for
``idle_s`` seconds (``--unload-after``, default 300) is unloaded by the next look.  So the
dashboard's memory for models is at most ``max_loaded`` models (each as much as ``nlptasks
infer`` takes for that run), docs/ui.md.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlptasks.errors import DataError, NlptasksError, first_line
from nlptasks.serve.errors import ApiError

__all__ = ["Loaded", "ModelPool"]


@dataclass
class Loaded:
    """One loaded run: its served model (predictor, worker thread) and when it was last used."""

    run_id: str
    served: Any  # nlptasks.serve.state.ServedModel
    loaded_at: float = field(default_factory=time.monotonic)
    used_at: float = field(default_factory=time.monotonic)
    seconds: float = 0.0


class ModelPool:
    """The loaded runs, by run id."""

    def __init__(self, max_loaded: int = 2, idle_s: float = 300.0) -> None:
        self.max_loaded = max_loaded
        self.idle_s = idle_s
        self.loaded: dict[str, Loaded] = {}
        self._lock = threading.Lock()
        self._loading: dict[str, asyncio.Future[Loaded]] = {}

    def describe(self) -> dict[str, Any]:
        """The loaded runs and the bounds (the page shows them)."""
        self.unload_idle()
        now = time.monotonic()
        return {
            "max_loaded": self.max_loaded,
            "idle_s": self.idle_s,
            "loaded": [
                {"id": m.run_id, "idle_s": round(now - m.used_at, 1), "load_s": round(m.seconds, 2)}
                for m in self.loaded.values()
            ],
        }

    def unload_idle(self) -> list[str]:
        """Unload every run unused for ``idle_s``; their ids."""
        now = time.monotonic()
        with self._lock:
            gone = [k for k, m in self.loaded.items() if now - m.used_at >= self.idle_s]
            for key in gone:
                self._unload(key)
        return gone

    def _unload(self, run_id: str) -> None:
        model = self.loaded.pop(run_id, None)
        if model is not None:
            model.served.executor.shutdown(wait=False, cancel_futures=True)

    def unload(self, run_id: str) -> bool:
        with self._lock:
            present = run_id in self.loaded
            self._unload(run_id)
        return present

    def close(self) -> None:
        with self._lock:
            for key in list(self.loaded):
                self._unload(key)

    async def get(self, run_id: str, run_dir: Path) -> Loaded:
        """The loaded run, loading it (off the event loop) when it is not; one load per run at a time."""
        self.unload_idle()
        model = self.loaded.get(run_id)
        if model is not None:
            model.used_at = time.monotonic()
            return model
        pending = self._loading.get(run_id)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(self._load, run_id, run_dir))
            self._loading[run_id] = pending
            pending.add_done_callback(lambda _: self._loading.pop(run_id, None))
        return await asyncio.shield(pending)

    def _load(self, run_id: str, run_dir: Path) -> Loaded:
        from nlptasks.serve.models import load_models

        start = time.monotonic()
        try:
            served = load_models([run_dir], ["run"])["run"]
        except NlptasksError as exc:
            raise ApiError(400, f"id: run {run_id!r} cannot be loaded: {exc.render()}", "id") from None
        model = Loaded(run_id, served, seconds=time.monotonic() - start)
        with self._lock:
            while len(self.loaded) >= self.max_loaded:
                oldest = min(self.loaded.values(), key=lambda m: m.used_at)
                self._unload(oldest.run_id)
            self.loaded[run_id] = model
        return model

    async def predict(self, run_id: str, run_dir: Path, inputs: list[Any]) -> list[dict[str, Any]]:
        """What ``nlptasks infer`` prints for ``inputs`` with the run (loaded if need be)."""
        model = await self.get(run_id, run_dir)
        try:
            outputs = await model.served.call(model.served.predictor, inputs)
        except DataError as exc:
            raise ApiError(400, f"inputs: {exc.render()}", "inputs") from None
        except NlptasksError as exc:
            raise ApiError(400, f"inputs: {first_line(exc)}", "inputs") from None
        finally:
            model.used_at = time.monotonic()
        return [dict(o) for o in outputs]
