"""Prometheus metrics of the service (``GET /metrics``), in a registry of its own per app.

* ``lamina_requests_total{method, route, status}`` and ``lamina_request_seconds{method, route}``
  (a histogram) — per route template (``/v1/memories/{item_id}``), counted by ASGI middleware so
  that refused requests (401, 413, 422, 503) count too;
* ``lamina_embed_seconds`` (a histogram) and ``lamina_embedded_texts_total`` — time in the
  embedder (:class:`TimedEmbedder` wraps the memory's embedder);
* ``lamina_pending_requests`` and ``lamina_rejected_total{reason}`` — the work pool's queue;
  ``lamina_queue_seconds`` and ``lamina_call_seconds`` (histograms) — each memory call's wait for
  a thread and its run on it (what ``bench/bench_serve.py`` splits a request's time into);
* ``lamina_worker{pid}`` — the worker process that answered the scrape (each worker of
  ``--workers N`` keeps its own counts);
* ``lamina_users{tenant}`` and ``lamina_items{tenant}`` — counted from the memory at scrape time;
* ``lamina_rate_limited_total{budget}`` (429s, ``auth`` or ``writes``) and
  ``lamina_auth_failures_total`` (401s to an offered key) — the rate limits (:mod:`~lamina.serve.ratelimit`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..embedders import Embedder, is_lexical
from .tenancy import SEP

__all__ = ["ServeMetrics", "TimedEmbedder", "MetricsMiddleware", "TenantCollector"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServeMetrics:
    """The service's metric objects, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "lamina_requests", "HTTP requests by route template and status", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "lamina_request_seconds",
            "HTTP request latency by route template",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.embed_seconds = Histogram(
            "lamina_embed_seconds", "Time in the embedder per batch", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.embedded_texts = Counter("lamina_embedded_texts", "Texts embedded", registry=r)
        self.pending = Gauge("lamina_pending_requests", "Memory calls running or waiting for a thread", registry=r)
        self.queue_seconds = Histogram(
            "lamina_queue_seconds",
            "Time a memory call waited for a thread of the work pool",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.call_seconds = Histogram(
            "lamina_call_seconds", "Time a memory call ran on its thread", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.rejected = Counter("lamina_rejected", "Requests refused by the work pool", ["reason"], registry=r)
        self.rate_limited = Counter(
            "lamina_rate_limited", "Requests refused (429) by a rate limit, by budget", ["budget"], registry=r
        )
        self.auth_failures = Counter("lamina_auth_failures", "Answers 401 (a missing or unknown key)", registry=r)
        # (with --workers N each worker answers /metrics with its own counts: the pid tells them apart)
        Gauge("lamina_worker", "The process that answered this scrape", ["pid"], registry=r).labels(
            str(os.getpid())
        ).set(1)


class TimedEmbedder:
    """An :class:`~lamina.embedders.Embedder` that times each batch of the one it wraps (same
    ``name`` and ``dim``: a database sees the same embedder)."""

    def __init__(self, inner: Embedder, metrics: ServeMetrics) -> None:
        self._inner = inner
        self._hist = metrics.embed_seconds
        self._texts = metrics.embedded_texts

    @property
    def dim(self) -> int:
        return int(self._inner.dim)

    @property
    def name(self) -> str:
        return str(self._inner.name)

    @property
    def lexical(self) -> bool:
        return is_lexical(self._inner)

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        t0 = time.perf_counter()
        try:
            return self._inner.embed(texts)
        finally:
            self._hist.observe(time.perf_counter() - t0)
            self._texts.inc(len(texts))

    def __repr__(self) -> str:
        return f"TimedEmbedder({self._inner!r})"


class MetricsMiddleware:
    """ASGI middleware counting and timing every HTTP request by its route template (a request
    the key gate refused before routing: ``unauthenticated``; one no route matched: ``unmatched``)."""

    def __init__(self, app: ASGIApp, metrics: ServeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        t0 = time.perf_counter()

        async def send_status(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or scope.get("lamina.route", "unmatched")
            method = scope.get("method", "?")
            self.metrics.latency.labels(method, path).observe(time.perf_counter() - t0)
            self.metrics.requests.labels(method, path, str(status)).inc()


class TenantCollector(Collector):
    """``lamina_users{tenant}`` and ``lamina_items{tenant}`` from ``counts()``: (stored user id,
    its item count) pairs. The anonymous tenant of a server without keys is labelled ``""``.

    Counting reads every user's statistics under the memory's lock, so a count is reused for
    ``max_age`` seconds (default 15: a scrape interval) rather than taken at every scrape.
    """

    def __init__(self, counts: Callable[[], list[tuple[str, int]]], max_age: float = 15.0) -> None:
        self._counts = counts
        self._max_age = max_age
        self._cached: tuple[float, list[tuple[str, int]]] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] > self._max_age:
            self._cached = (now, self._counts())
        users: dict[str, int] = {}
        items: dict[str, int] = {}
        for stored, n in self._cached[1]:
            tenant = stored.split(SEP, 1)[0] if SEP in stored else ""
            users[tenant] = users.get(tenant, 0) + 1
            items[tenant] = items.get(tenant, 0) + n
        gu = GaugeMetricFamily("lamina_users", "Users per tenant", labels=["tenant"])
        gi = GaugeMetricFamily("lamina_items", "Stored items per tenant (any layer)", labels=["tenant"])
        for t in sorted(users):
            gu.add_metric([t], users[t])
            gi.add_metric([t], items[t])
        yield gu
        yield gi
