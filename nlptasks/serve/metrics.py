"""The server's counters, in Prometheus' text exposition format (``GET /metrics``).

No client library: the format is a few lines per metric (``# HELP``, ``# TYPE``, then
``name{label="value"} number``).  What is counted:

``nlptasks_requests_total{model, endpoint, status}``  counter: answered requests (``endpoint`` is
    the route's template, e.g. ``/v1/predict/{name}``, or ``other`` for a request refused before
    routing: a body that is too large, late or not JSON; ``model`` is empty for routes of no
    model); ``status`` 499 counts clients that left before their answer, not server errors;
``nlptasks_request_duration_seconds{model, endpoint, quantile}``  summary: latency p50/p90/p99
    over the last :data:`WINDOW` requests of each route and model, with ``_sum`` and ``_count``
    over all;
``nlptasks_batch_size{model, le}``  histogram: inputs per predictor call (dynamic batching fills
    it: ``_sum / _count`` is the mean batch);
``nlptasks_queue_inputs{model}``  gauge: inputs waiting for a batch now;
``nlptasks_queue_limit{model}``  gauge: ``--max-queue``;
``nlptasks_model_info{model, task}``  gauge, always 1: the served models.

:class:`MetricsMiddleware` counts every HTTP request the app answers.  A route that serves one
model without ``{name}`` in its path (the OpenAI-compatible ones) names it for the counters with
``request.state.model = name``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from typing import Any

__all__ = [
    "BATCH_BUCKETS",
    "CLIENT_GONE",
    "CONTENT_TYPE",
    "QUANTILES",
    "WINDOW",
    "Metrics",
    "MetricsMiddleware",
    "quantile",
]

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
QUANTILES = (0.5, 0.9, 0.99)
WINDOW = 4096
"""Latencies kept per route and model for the quantiles (the most recent ones)."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CLIENT_GONE = 499
"""The status counted for a request whose client left before its answer (nginx's 499): a client
that disconnects mid-body or mid-wait is no server error."""


class Metrics:
    """Counters of one server; safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.latency: dict[tuple[str, str], deque[float]] = defaultdict(lambda: deque(maxlen=WINDOW))
        self.latency_sum: dict[tuple[str, str], float] = defaultdict(float)
        self.latency_count: dict[tuple[str, str], int] = defaultdict(int)
        self.batches: dict[str, list[int]] = {}
        self.batch_sum: dict[str, int] = defaultdict(int)

    def observe_request(self, model: str, endpoint: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        with self._lock:
            self.requests[(model, endpoint, status)] += 1
            key = (model, endpoint)
            self.latency[key].append(seconds)
            self.latency_sum[key] += seconds
            self.latency_count[key] += 1

    def observe_batch(self, model: str, size: int) -> None:
        """Count one predictor call of ``size`` inputs."""
        with self._lock:
            counts = self.batches.setdefault(model, [0] * (len(BATCH_BUCKETS) + 1))
            index = next((i for i, bound in enumerate(BATCH_BUCKETS) if size <= bound), len(BATCH_BUCKETS))
            counts[index] += 1
            self.batch_sum[model] += size

    def batch_count(self, model: str) -> int:
        """Predictor calls made for ``model`` so far."""
        with self._lock:
            return sum(self.batches.get(model, ()))

    def render(self, state: Any = None) -> str:
        """The text exposition of every counter (``state``: a ServerState, for the queue gauges)."""
        out: list[str] = []
        with self._lock:
            _family(out, "nlptasks_requests_total", "counter", "Answered HTTP requests.")
            for (model, endpoint, status), n in sorted(self.requests.items()):
                out.append(
                    _line("nlptasks_requests_total", {"model": model, "endpoint": endpoint, "status": str(status)}, n)
                )
            _family(
                out,
                "nlptasks_request_duration_seconds",
                "summary",
                f"Request latency; quantiles over the last {WINDOW} requests of each route and model.",
            )
            for key in sorted(self.latency):
                model, endpoint = key
                labels = {"model": model, "endpoint": endpoint}
                recent = sorted(self.latency[key])
                for q in QUANTILES:
                    out.append(
                        _line(
                            "nlptasks_request_duration_seconds", {**labels, "quantile": f"{q:g}"}, quantile(recent, q)
                        )
                    )
                out.append(_line("nlptasks_request_duration_seconds_sum", labels, self.latency_sum[key]))
                out.append(_line("nlptasks_request_duration_seconds_count", labels, self.latency_count[key]))
            _family(out, "nlptasks_batch_size", "histogram", "Inputs per predictor call (dynamic batching).")
            for model, counts in sorted(self.batches.items()):
                running = 0
                for bound, n in zip([*map(str, BATCH_BUCKETS), "+Inf"], counts, strict=True):
                    running += n
                    out.append(_line("nlptasks_batch_size_bucket", {"model": model, "le": bound}, running))
                out.append(_line("nlptasks_batch_size_sum", {"model": model}, self.batch_sum[model]))
                out.append(_line("nlptasks_batch_size_count", {"model": model}, running))
        if state is not None:
            models = state.models
            _family(out, "nlptasks_queue_inputs", "gauge", "Inputs waiting for a batch.")
            for name, served in models.items():
                batcher = getattr(served, "batcher", None)
                out.append(_line("nlptasks_queue_inputs", {"model": name}, getattr(batcher, "queued", 0)))
            _family(out, "nlptasks_queue_limit", "gauge", "Most inputs that may wait (--max-queue).")
            for name in models:
                out.append(_line("nlptasks_queue_limit", {"model": name}, state.settings.max_queue))
            _family(out, "nlptasks_model_info", "gauge", "The served models and their tasks.")
            for name, served in models.items():
                out.append(_line("nlptasks_model_info", {"model": name, "task": served.task}, 1))
        return "\n".join(out) + "\n"


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values (nearest rank); NaN when there are none."""
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _line(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {_number(value)}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class MetricsMiddleware:
    """ASGI middleware: counts each HTTP request with its route, model, status and latency."""

    def __init__(self, app: Any, metrics: Metrics, models: Any) -> None:
        self.app = app
        self.metrics = metrics
        self.models = models  # the served models by name: other names are not labels

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [0]
        gone = [False]

        async def receiving() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone[0] = True
            return message

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        finally:
            if not status[0]:  # no answer: the client left first (499, as nginx logs it), else a failure
                status[0] = CLIENT_GONE if gone[0] else 500
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "other"
            name = (scope.get("path_params") or {}).get("name") or (scope.get("state") or {}).get("model") or ""
            model = name if name in self.models else ""
            self.metrics.observe_request(model, endpoint, status[0], time.perf_counter() - start)
