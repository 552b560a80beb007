"""Prometheus metrics of one worker: requests by outcome and handler latency.

Each worker has a registry of its own (several workers may share a process in tests); with
`WORKER_METRICS_PORT` set, `Worker.serve` exposes it on 127.0.0.1 at that port. Without it
a worker has none, and prometheus-client is imported only here, when one is made: it took
14 ms of a new worker's start (docs/benchmarks.md, "Cold key").
"""

from __future__ import annotations

from typing import Any

_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


#: How a request can end, as counted (`Worker.stats`, `osrdyne_worker_requests_total`).
OUTCOMES = ("ok", "failed", "requeued", "expired", "invalid", "stalled")


class WorkerMetrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "osrdyne_worker_requests_total",
            "Requests this worker finished, by outcome: ok (handled), failed (answered with "
            "an error status), requeued (handler asked to retry later), expired (the caller's "
            "deadline had passed before the handler ran), invalid (protocol headers not as the "
            "protocol allows: answered invalid_request), stalled (the handler overran its "
            "time: answered, see `handler_timeout`).",
            ["outcome"],
            registry=self.registry,
        )
        self.handler_seconds = Histogram(
            "osrdyne_worker_handler_seconds",
            "Time spent in handlers, by `x-rpc-path` (empty: the default handler).",
            ["path"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.requests.labels(outcome)
        self._server: Any = None
        #: The port the metrics are served on, once `serve` ran (useful with port 0).
        self.port: int | None = None

    def serve(self, port: int, *, host: str = "127.0.0.1") -> None:
        """Expose the metrics over HTTP (a daemon thread of prometheus-client)."""
        from prometheus_client import start_http_server

        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
