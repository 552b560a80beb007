"""The worker's side of W3C trace context in AMQP headers (OpenTelemetry, optional).

A request's `traceparent`/`tracestate` headers become the parent of a CONSUMER span
"osrdyne.handle" around the handler; the reply carries that span's context back. Without
OpenTelemetry installed (or without an SDK configured) nothing happens. The controller side
lives in `osrdyne.tracing`: the SDK takes only the protocol from osrdyne.

OpenTelemetry is looked up when a request is handled, and only if the process has imported
it already: a process that configures a tracer provider (or runs under
`opentelemetry-instrument`) has; one that does not would trace nothing, and importing it at
start cost a new worker 5 ms before its first answer.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from osrdyne import wire


def _opentelemetry() -> tuple[types.ModuleType, types.ModuleType] | None:
    """OpenTelemetry's `propagate` and `trace`, once the process has imported OpenTelemetry."""
    if "opentelemetry" not in sys.modules:
        return None
    from opentelemetry import propagate, trace

    return propagate, trace


@contextlib.contextmanager
def handling(
    headers: Mapping[str, Any] | None, *, key: str, pool: str, path: str | None
) -> Iterator[Any]:
    """Run the body inside a span continuing the request's trace; yields the span (or None)."""
    found = _opentelemetry()
    if found is None:
        yield None
        return
    propagate, trace = found
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
    found = _opentelemetry()
    if found is not None:
        found[0].inject(headers)
