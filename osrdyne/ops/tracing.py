"""W3C trace context (`traceparent`, `tracestate`) in AMQP headers, through OpenTelemetry.

OpenTelemetry is optional (`pip install osrdyne[otel]`): without it, or without an SDK
configured, every helper here does nothing and no header is added. With it, the client opens a
span "osrdyne.call" per request and injects its context into the request's headers; the
orphan processor republishes requests with their headers unchanged, the worker SDK continues
the trace around its handler and puts it on its reply, and the controller's own answers
(dead letters, invalid keys) carry the request's trace headers back.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - exercised where OpenTelemetry is not installed
    propagate = None  # type: ignore[assignment]
    trace = None  # type: ignore[assignment]


def enabled() -> bool:
    """True when the OpenTelemetry API is importable."""
    return trace is not None


def _configured() -> bool:
    """True when an OpenTelemetry SDK is set up: without one, spans would be no-ops whose
    creation and propagation still cost about 100 µs a call on the client's hot path."""
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


class CallSpan:
    """The client span of one call; `inject` writes its context into request headers."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def inject(self, headers: MutableMapping[str, Any]) -> None:
        if self._span is None:
            return
        context = trace.set_span_in_context(self._span)
        propagate.inject(headers, context=context)

    def finish(self, status: str | None, error: BaseException | None = None) -> None:
        if self._span is None:
            return
        if status is not None:
            self._span.set_attribute("osrdyne.status", status)
        if error is not None:
            self._span.record_exception(error)
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
        elif status is not None and status != "ok":
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, status))
        self._span.end()


NO_SPAN = CallSpan(None)


def start_call_span(pool: str, key: str, path: str | None) -> CallSpan:
    """A CLIENT span "osrdyne.call", not made current: it lives across the call's awaits and
    ends with `CallSpan.finish`."""
    if not _configured():
        return NO_SPAN
    span = trace.get_tracer("osrdyne").start_span(
        "osrdyne.call",
        kind=trace.SpanKind.CLIENT,
        attributes={
            "messaging.system": "rabbitmq",
            "messaging.destination.name": f"{pool}-req-xchg",
            "messaging.rabbitmq.destination.routing_key": key,
            "osrdyne.pool": pool,
            "osrdyne.key": key,
            "osrdyne.path": path or "",
        },
    )
    return CallSpan(span)
