"""``/metrics`` in the Prometheus text format (prometheus-client), one registry per app.

Every app owns a :class:`ServiceMetrics` with its own ``CollectorRegistry`` (never the process-wide
default), so several apps in one process (tests) count separately. Requests are counted by
endpoint, meaning the route template (``/v1/recommend``), never the raw path, so that clients cannot
grow the label set: paths that match no route count as ``unmatched``. The registry also holds the
process's own metrics (``process_*``: CPU seconds, resident memory, open file descriptors;
``python_gc_*``; ``python_info``), the requests in flight, the time the model spends per call
(``attnrec_inference_seconds``, by model and endpoint, without the queueing before it) and each
model's reload counts, last outcome and whether a reload runs now.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
CONTENT_TYPE = CONTENT_TYPE_LATEST
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


M = TypeVar("M", Counter, Gauge, Histogram)


@dataclass(frozen=True, eq=False)
class Metric(Generic[M]):
    """One metric of the service, declared once: each app's registry builds it from this record, and
    the reference page of the docs lists it from the same record. Each record is one object, found by
    identity (a request looks several up: no hashing of its fields on that path)."""

    kind: type[M]
    name: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()

    @property
    def exposed(self) -> str:
        """The name a scrape shows: prometheus-client adds ``_total`` to a counter's."""
        return f"{self.name}_total" if self.kind is Counter else self.name

    def build(self, registry: CollectorRegistry) -> M:
        """This metric, registered in ``registry``."""
        extra: dict[str, Any] = {"buckets": self.buckets} if self.buckets else {}
        return self.kind(self.name, self.help, self.labels, registry=registry, **extra)


REQUESTS = Metric(
    Counter,
    "attnrec_http_requests",
    ("endpoint", "method", "status"),
    "HTTP requests answered, 401, 404 and 413 included, by endpoint (the route template, 'unmatched' "
    "for unknown paths), method (unknown methods count as 'other') and status, so that clients cannot "
    "grow the label set.",
)
LATENCY = Metric(
    Histogram,
    "attnrec_http_request_duration_seconds",
    ("endpoint",),
    "Time from a request's arrival to the end of its answer, by endpoint.",
    LATENCY_BUCKETS,
)
IN_FLIGHT = Metric(
    Gauge, "attnrec_http_requests_in_flight", (), "HTTP requests being handled now (the scrape included)."
)
INFERENCE = Metric(
    Histogram,
    "attnrec_inference_seconds",
    ("model", "endpoint"),
    "Time the model spends on one call (a micro-batch of recommendations, a similar-items or "
    "explanation request), without queueing, by model and endpoint.",
    LATENCY_BUCKETS,
)
BATCH_SIZE = Metric(
    Histogram,
    "attnrec_batch_size",
    ("model",),
    "Recommendation requests scored together in one recommend_many call (a micro-batch; a failed "
    "batch's one-by-one retries count as batches of 1), by model.",
    BATCH_BUCKETS,
)
LOAD_SECONDS = Metric(
    Gauge,
    "attnrec_model_load_seconds",
    ("model",),
    "Seconds the last (re)load of a model took (reading, backend switch, warm-up).",
)
LOADED_AT = Metric(
    Gauge,
    "attnrec_model_loaded_timestamp_seconds",
    ("model",),
    "Unix time the served version of a model was loaded.",
)
RELOADS = Metric(
    Counter,
    "attnrec_model_reloads",
    ("model",),
    "Successful hot reloads, by model (0 for every served model from the start).",
)
RELOAD_FAILURES = Metric(
    Counter,
    "attnrec_model_reload_failures",
    ("model",),
    "Refused hot reloads (the previous model kept serving), by model (0 for every served model from "
    "the start).",
)
RELOAD_LAST_OK = Metric(
    Gauge,
    "attnrec_model_reload_last_success",
    ("model",),
    "Outcome of the last hot reload of a model: 1 succeeded, 0 refused (absent: never reloaded).",
)
RELOAD_LAST_AT = Metric(
    Gauge,
    "attnrec_model_reload_last_timestamp_seconds",
    ("model",),
    "Unix time the last hot reload of a model ended (succeeded or refused).",
)
RELOADING = Metric(Gauge, "attnrec_reload_in_progress", (), "1 while a hot reload or an item addition runs.")
METRICS: tuple[Metric[Any], ...] = (
    REQUESTS,
    LATENCY,
    IN_FLIGHT,
    INFERENCE,
    BATCH_SIZE,
    LOAD_SECONDS,
    LOADED_AT,
    RELOADS,
    RELOAD_FAILURES,
    RELOAD_LAST_OK,
    RELOAD_LAST_AT,
    RELOADING,
)
"""Every metric of the service besides the process's own, in the order the reference lists them."""


class ServiceMetrics:
    """The metrics of one app (:data:`METRICS`): requests, latency, micro-batch sizes, model loads and
    reloads."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        for process_wide in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(process_wide)  # the process's own metrics, read at each scrape
        self.built = {metric: metric.build(r) for metric in METRICS}

    def __getitem__(self, metric: Metric[M]) -> M:
        """``metric`` as this app's registry holds it."""
        built: M = self.built[metric]
        return built

    def track(self, names: list[str]) -> None:
        """Export the reload counters of the models ``names`` at 0 (so that rates work from the start)."""
        for name in names:
            self[RELOADS].labels(name)
            self[RELOAD_FAILURES].labels(name)

    def model_loaded(self, name: str, seconds: float, at: float) -> None:
        """Record a (re)load of ``name`` that took ``seconds`` and finished at Unix time ``at``."""
        self[LOAD_SECONDS].labels(name).set(seconds)
        self[LOADED_AT].labels(name).set(at)

    def reload_done(self, name: str, ok: bool) -> None:
        """Count one reload of ``name``, successful or refused, and record it as the last outcome."""
        self[RELOADS if ok else RELOAD_FAILURES].labels(name).inc()
        self[RELOAD_LAST_OK].labels(name).set(1 if ok else 0)
        self[RELOAD_LAST_AT].labels(name).set(time.time())

    def watch_reloading(self, running: Callable[[], bool]) -> None:
        """Read ``attnrec_reload_in_progress`` from ``running()`` at each scrape."""
        self[RELOADING].set_function(lambda: float(running()))

    def inferred(self, name: str, endpoint: str, seconds: float) -> None:
        """Record one model call of ``seconds`` on model ``name`` for ``endpoint``."""
        self[INFERENCE].labels(name, endpoint).observe(seconds)

    def batch(self, name: str, size: int) -> None:
        """Record one ``recommend_many`` call of ``size`` requests on model ``name``."""
        self[BATCH_SIZE].labels(name).observe(size)

    def text(self) -> bytes:
        """The exposition (Prometheus text format, :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)


def endpoint_of(scope: Scope, routes: list[BaseRoute]) -> str:
    """The template of the route ``scope`` went to (also when only its method was wrong), else ``unmatched``.

    The router records the route in the scope; requests answered before routing (401, 413) are
    matched against ``routes``.
    """
    route = scope.get("route")
    if isinstance(route, Route):
        return route.path
    for route in routes:
        match, _ = route.matches(scope)
        if match != Match.NONE and isinstance(route, Route):
            return route.path
    return UNMATCHED


class RequestMetrics:
    """Pure ASGI middleware counting every HTTP request (401s, 404s and 413s included) and timing it."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, routes: list[BaseRoute]) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes  # for requests answered before routing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        method = scope["method"] if scope["method"] in METHODS else "other"  # clients choose it: bounded
        status: int | None = None  # none sent: the client went away before an answer (e.g. mid-body)

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics[IN_FLIGHT].inc()
        try:
            await self.app(scope, receive, sending)
        except BaseException:
            status = (
                status or 500
            )  # what the server error handler answers when the app raises before answering
            raise
        finally:
            self.metrics[IN_FLIGHT].dec()
            endpoint = endpoint_of(scope, self.routes)
            self.metrics[REQUESTS].labels(
                endpoint, method, "disconnected" if status is None else str(status)
            ).inc()
            self.metrics[LATENCY].labels(endpoint).observe(time.perf_counter() - t0)


__all__ = ["CONTENT_TYPE", "RequestMetrics", "ServiceMetrics", "UNMATCHED", "endpoint_of"]
