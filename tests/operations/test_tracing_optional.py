"""Tracing is optional: without OpenTelemetry the helpers add nothing and cost nothing (the
controller's module-level import is simulated away, the real absence being an install
without `[otel]`; the worker SDK uses OpenTelemetry only once the process has imported it,
so its absence is simply OpenTelemetry not in `sys.modules`)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from osrdyne import wire
from osrdyne.ops import tracing
from worker_sdk import tracing as worker_tracing


def test_without_opentelemetry_nothing_is_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "trace", None)
    monkeypatch.delitem(sys.modules, "opentelemetry", raising=False)
    headers: dict[str, Any] = {}
    span = tracing.start_call_span("p", "k", None)
    span.inject(headers)
    span.finish("ok")
    with worker_tracing.handling(
        {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, key="k", pool="p", path=None
    ) as handle:
        assert handle is None
        worker_tracing.inject(headers)
    assert headers == {}


def test_trace_headers_are_copied_as_text() -> None:
    parent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    found = wire.trace_headers({"traceparent": parent.encode(), "x-status": "ok", "tracestate": 1})
    assert found == {"traceparent": parent}
    assert wire.trace_headers(None) == {}
