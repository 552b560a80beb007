"""W3C trace context end to end, recorded by the OpenTelemetry SDK's in-memory exporter: the
client's span, the worker's span around its handler (an in-process worker, so both record
here) and the reply's `traceparent` share one trace, through the orphan republish and on the
fast path; a dead-letter answer from the controller carries the request's context back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from osrdyne import Client, Status
from tests import broker
from worker_sdk import Request, Worker

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def provider() -> Iterator[None]:
    """One SDK provider per process (OpenTelemetry refuses to replace a global one)."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    else:
        sdk = TracerProvider()
        sdk.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(sdk)
    yield


@pytest.fixture
def spans(provider: None) -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
async def echo_worker(make_controller: Any, pool: str) -> AsyncIterator[str]:
    """A controller whose driver is noop and an echo worker for one key, in this process."""
    await make_controller(pool, driver={"kind": "noop"})
    key = "traced"
    worker = Worker(broker.worker_settings(pool, key))

    @worker.handler()
    async def echo(request: Request) -> bytes:
        return request.body

    stop = asyncio.Event()
    task = asyncio.create_task(worker.serve(stop), name="in-process echo worker")
    yield key
    stop.set()
    await asyncio.wait_for(task, 30)


def one(spans: InMemorySpanExporter, name: str, key: str, index: int = 0) -> ReadableSpan:
    found = [
        s
        for s in spans.get_finished_spans()
        if s.name == name and (s.attributes or {}).get("osrdyne.key") == key
    ]
    return found[index]


def traceparent(headers: Any) -> tuple[str, str]:
    value = headers["traceparent"]
    value = value.decode() if isinstance(value, bytes) else value
    version, trace_id, parent_id, _flags = value.split("-")
    assert version == "00"
    return trace_id, parent_id


async def test_one_trace_from_client_through_worker_to_reply(
    spans: InMemorySpanExporter, echo_worker: str, client: Client, pool: str
) -> None:
    key = echo_worker
    cold = await client.call(pool, key, b"cold", timeout=60)  # orphan, republished
    warm = await client.call(pool, key, b"warm", timeout=60)  # fast path
    assert cold.ok and warm.ok
    for index, response in enumerate((cold, warm)):
        call = one(spans, "osrdyne.call", key, index)
        handle = one(spans, "osrdyne.handle", key, index)
        assert call.kind is trace.SpanKind.CLIENT and handle.kind is trace.SpanKind.CONSUMER
        assert handle.context.trace_id == call.context.trace_id
        assert handle.parent is not None and handle.parent.span_id == call.context.span_id
        trace_id, parent_id = traceparent(response.headers)
        assert trace_id == format(call.context.trace_id, "032x")
        assert parent_id == format(handle.context.span_id, "016x")  # answered from the handler
        assert call.attributes is not None and call.attributes["osrdyne.status"] == "ok"
    assert one(spans, "osrdyne.call", key, 0).context.trace_id != (
        one(spans, "osrdyne.call", key, 1).context.trace_id
    )


async def test_a_dead_letter_answer_keeps_the_request_trace(
    make_controller: Any, spans: InMemorySpanExporter, client: Client, pool: str
) -> None:
    await make_controller(pool, driver={"kind": "noop"}, queues={"message_ttl": 1})
    response = await client.call(pool, "nobody", b"x", timeout=60)
    assert response.status == Status.EXPIRED
    call = one(spans, "osrdyne.call", "nobody")
    trace_id, parent_id = traceparent(response.headers)
    assert (trace_id, parent_id) == (
        format(call.context.trace_id, "032x"),
        format(call.context.span_id, "016x"),
    )
    assert call.status.status_code is trace.StatusCode.ERROR  # not `ok`
