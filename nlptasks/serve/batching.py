"""Dynamic batching: concurrent requests to one model share forward passes.

Each served model has a :class:`Batcher`.  A request puts its inputs in the model's queue and
waits; the batcher's loop (one asyncio task per model) takes the first waiting request, gathers
more until ``max_batch_size`` inputs are waiting or ``max_wait_ms`` have passed since the first
arrived, sorts the gathered inputs by length (so a forward pass pads little, whatever the
predictor does), calls the predictor once on the model's worker thread, and hands each request
its own outputs in order.  While the worker runs a batch, new requests queue up and form the
next one: the busier the server, the fuller the batches.

Requests are whole: a request's inputs are never split across batches (a request longer than
``max_batch_size`` is a batch of its own, which the predictor cuts into forward passes of its
``batch_size``), so a request's answer is always computed from its own inputs, in its own order.
A predictor gives each input the same result whatever else is in the call (tests/test_parity.py),
so a merged batch answers each request as a call of its own would.  When the merged call fails
(one request's bad input) or returns a different number of outputs than it got inputs (a task that
reads consecutive plain strings as the fields of one input, as ``pair`` does), the batch's requests
are run again one at a time: only the bad request fails, and each gets exactly ``predictor(its
inputs)``.

Bounded: when more than ``max_queue`` inputs wait, a new request is refused at once
(:class:`~nlptasks.serve.errors.ApiError` 503 with ``Retry-After``); a request that waits longer
than ``timeout_s`` gets 504; a request whose client went away (its future cancelled) is dropped
from the queue and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from nlptasks.inference.streaming import predict_chunk
from nlptasks.serve.errors import ApiError
from nlptasks.serve.memory import Trimmer

__all__ = ["Batcher", "input_length"]

log = logging.getLogger("nlptasks.serve")


def input_length(item: Any) -> int:
    """The length an input is sorted by: the characters of its texts (fields of an object, texts of
    a list), recursively."""
    if isinstance(item, str):
        return len(item)
    if isinstance(item, dict):
        return sum(input_length(v) for v in item.values())
    if isinstance(item, (list, tuple)):
        return sum(input_length(v) for v in item)
    return 0


@dataclass
class _Waiting:
    """One request in the queue: its inputs and the future its outputs go to."""

    inputs: list[Any]
    future: asyncio.Future[list[dict[str, Any]]]


class Batcher:
    """The queue and batching loop of one served model.

    :param served: the :class:`~nlptasks.serve.state.ServedModel` (its predictor and worker thread).
    :param settings: the :class:`~nlptasks.serve.state.ServeSettings` (``max_batch_size``,
        ``max_wait_ms``, ``max_queue``, ``timeout_s``).
    :param metrics: a :class:`~nlptasks.serve.metrics.Metrics` told each batch's size, or ``None``.
    """

    def __init__(self, served: Any, settings: Any, metrics: Any = None) -> None:
        self.served = served
        self.settings = settings
        self.metrics = metrics
        self.queued = 0  # inputs waiting (not yet in a batch)
        self._trim = Trimmer()
        self._waiting: deque[_Waiting] = deque()
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- the request side ---------------------------------------------------------------------

    async def predict(self, inputs: list[Any]) -> list[dict[str, Any]]:
        """The predictor's outputs for ``inputs``, computed in a batch with whatever else waits.

        :raises ApiError: 503 (queue full, with ``Retry-After``) or 504 (timeout).
        :raises Exception: what the predictor raised on these inputs alone.
        """
        self._ensure_running()
        n = len(inputs)
        limit = self.settings.max_queue
        if self.queued and self.queued + n > limit:
            raise ApiError(
                503,
                f"the server is busy: {self.queued} inputs wait for model {self.served.name!r} "
                f"(limit {limit}); try again in a moment",
                headers={"Retry-After": "1"},
            )
        loop = asyncio.get_running_loop()
        item = _Waiting(list(inputs), loop.create_future())
        self._waiting.append(item)
        self.queued += n
        assert self._arrived is not None
        self._arrived.set()
        timeout = self.settings.timeout_s
        try:
            return await asyncio.wait_for(item.future, timeout)
        except TimeoutError:
            raise ApiError(
                504,
                f"no answer within the timeout ({timeout:g} s): the server is overloaded or "
                "the inputs are very long; try again, or send fewer inputs",
            ) from None
        finally:
            self._drop(item)

    def _drop(self, item: _Waiting) -> None:
        """Forget a request that is answered, timed out or whose client left."""
        if not item.future.done():
            item.future.cancel()
        try:
            self._waiting.remove(item)
        except ValueError:
            return  # already taken into a batch
        self.queued -= len(item.inputs)

    # -- the loop -------------------------------------------------------------------------------

    def _ensure_running(self) -> None:
        """Start the loop in the running event loop (again, if an earlier loop has gone)."""
        loop = asyncio.get_running_loop()
        if self._task is not None and self._loop is loop and not self._task.done():
            return
        if self._loop is not loop:  # a new event loop (a test client's): nothing old can be answered
            self._waiting.clear()
            self.queued = 0
        self._loop = loop
        self._arrived = asyncio.Event()
        self._task = loop.create_task(self._run_forever(), name=f"batcher-{self.served.name}")

    def start(self) -> None:
        """Start the loop now (the app does at startup; :meth:`predict` does when it is not running)."""
        self._ensure_running()

    async def stop(self) -> None:
        """Stop the loop; requests still waiting get 503."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001, S110 - it is stopping: nothing to report
                pass
        for item in list(self._waiting):
            if not item.future.done():
                item.future.set_exception(ApiError(503, "the server is stopping", headers={"Retry-After": "1"}))
        self._waiting.clear()
        self.queued = 0

    async def _run_forever(self) -> None:
        while True:
            try:
                batch = await self._gather()
                if batch:
                    await self._run(batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one batch stop the model's loop
                log.exception("batching loop of model %r: unexpected error (the loop goes on)", self.served.name)

    async def _gather(self) -> list[_Waiting]:
        """Wait for a request, then for more until the batch is full or ``max_wait_ms`` is over."""
        assert self._arrived is not None
        while not self._waiting:
            self._arrived.clear()
            await self._arrived.wait()
        size = self.settings.max_batch_size
        deadline = time.monotonic() + self.settings.max_wait_ms / 1000
        while self.queued < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                break
        batch: list[_Waiting] = []
        count = 0
        while self._waiting:
            item = self._waiting[0]
            if batch and count + len(item.inputs) > size:
                break
            self._waiting.popleft()
            self.queued -= len(item.inputs)
            if item.future.done():  # its client left or it timed out: skip it
                continue
            batch.append(item)
            count += len(item.inputs)
        return batch

    async def _run(self, batch: list[_Waiting]) -> None:
        """Predict a batch: one call for all its requests, or one call each when that fails."""
        if len(batch) == 1:
            await self._alone(batch[0])
            return
        flat = [(i, x) for i, item in enumerate(batch) for x in item.inputs]
        order = sorted(range(len(flat)), key=lambda k: input_length(flat[k][1]))
        try:
            outputs = await self._call([flat[k][1] for k in order])
        except Exception as exc:  # noqa: BLE001 - whatever it was, each request alone says
            log.info(
                "model %r: a batch of %d requests failed (%s); running them one at a time",
                self.served.name,
                len(batch),
                type(exc).__name__,
            )
            outputs = None
        if outputs is None or len(outputs) != len(flat):
            for item in batch:
                if not item.future.done():
                    await self._alone(item)
            return
        placed: list[Any] = [None] * len(flat)
        for out, k in zip(outputs, order, strict=True):
            placed[k] = out
        start = 0
        for item in batch:
            end = start + len(item.inputs)
            if not item.future.done():
                item.future.set_result(placed[start:end])
            start = end

    async def _alone(self, item: _Waiting) -> None:
        """One request's inputs in one call, as they came: exactly ``predictor(inputs)``."""
        if item.future.done():  # its client left while the batch waited for the worker
            return
        try:
            outputs = await self._call(item.inputs)
        except Exception as exc:  # noqa: BLE001 - handed to the request, which answers it
            if not item.future.done():
                item.future.set_exception(exc)
            return
        if not item.future.done():
            item.future.set_result(outputs)

    async def _call(self, inputs: list[Any]) -> list[dict[str, Any]]:
        """One predictor call on the model's worker thread, through the one checked call every
        caller of a predictor makes (:func:`nlptasks.inference.streaming.predict_chunk`)."""
        if self.metrics is not None:
            self.metrics.observe_batch(self.served.name, len(inputs))
        return await self.served.call(self._predict, inputs)

    def _predict(self, inputs: list[Any]) -> list[dict[str, Any]]:  # on the model's worker thread
        try:
            return list(predict_chunk(self.served.predictor, inputs))
        finally:
            self._trim()  # freed buffers back to the system, every few seconds (nlptasks.serve.memory)
