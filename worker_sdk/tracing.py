"""The worker's side of W3C trace context in AMQP headers (OpenTelemetry, optional).

A request's `traceparent`/`tracestate` headers become the parent of a CONSUMER span
"osrdyne.handle" around the handler; the reply carries that span's context back. Without
OpenTelemetry installed (or without an SDK configured) nothing happens. The controller side
lives in `osrdyne.tracing`: the SDK takes only the protocol from osrdyne.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from osrdyne import wire

try:
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised where OpenTelemetry is not installed
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]


@contextlib.contextmanager
def handling(
    headers: Mapping[str, Any] | None, *, key: str, pool: str, path: str | None
) -> Iterator[Any]:
    """Run the body inside a span continuing the request's trace; yields the span (or None)."""
    if trace is None:
        yield None
        return
    parent = propagate.extract(wire.trace_headers(headers))
    with trace.get_tracer("osrdyne.worker").start_as_current_span(
        "osrdyne.handle",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={"osrdyne.pool": pool, "osrdyne.key": key, "osrdyne.path": path or ""},
    ) as span:
        yield span


def inject(headers: MutableMapping[str, Any]) -> None:
    """Write the current span's context (if any) into reply headers."""
    if propagate is not None:
        propagate.inject(headers)
