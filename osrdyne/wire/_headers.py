"""AMQP header names of the protocol, and reading header values sent by any client.

Header values arrive as whatever the sender's library made of them: text, bytes (an AMQP long
string that is not UTF-8 decodes to bytes), numbers, tables, or nothing. Three rules, each in
one function here:

- `text()` is the one way to read a value as text, for logs and documents;
- `request_problem()` decides whether a request's protocol headers are what the protocol
  allows (known good, checked before anything acts on them); a request that fails it is
  answered `invalid_request`, never retried;
- `encodable()` turns decoded headers back into values the AMQP encoder accepts, unchanged
  byte for byte, so a request can always be forwarded or parked as it came.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

from osrdyne.wire._text import has_control_characters, text


class Header(enum.StrEnum):
    """AMQP header names of the protocol."""

    STATUS = "x-status"
    RPC_PATH = "x-rpc-path"
    NON_TERMINATING = "x-non-terminating-response"
    EVENT = "x-event"
    WORKER_ID = "x-worker-id"
    #: Why a worker's start-up failed (on a `start-failed` activity report).
    REASON = "x-reason"
    DEADLINE = "x-deadline"
    FIRST_DEATH_REASON = "x-first-death-reason"
    DEATH = "x-death"
    #: Load figures on an activity report (optional; the group scaler reads them).
    HANDLED = "x-handled"
    BUSY_SECONDS = "x-busy-seconds"
    IN_FLIGHT = "x-in-flight"
    CONCURRENCY = "x-concurrency"


#: The headers that carry W3C trace context from a request to its worker and answers.
TRACE_HEADERS = ("traceparent", "tracestate")


def trace_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The trace-context headers of `headers`, as text (to continue or copy a trace)."""
    found: dict[str, str] = {}
    for name in TRACE_HEADERS:
        value = (headers or {}).get(name)
        if isinstance(value, str | bytes):
            found[name] = text(value) or ""
    return found


#: Longest `x-rpc-path` accepted, in bytes (an endpoint name, not a payload).
MAX_RPC_PATH_BYTES = 255


def request_problem(headers: Mapping[str, Any] | None) -> str | None:
    """Why a request's protocol headers are not what the protocol allows, or None.

    `x-rpc-path` is text (valid UTF-8) without control characters, at most 255 bytes;
    `x-deadline` is a finite number (epoch milliseconds; some clients send integers as
    doubles). Other headers are the client's own.
    """
    headers = headers or {}
    path = headers.get(Header.RPC_PATH)
    if path is not None:
        if not isinstance(path, str):
            return f"header {Header.RPC_PATH} is not text"
        if len(path.encode(errors="surrogateescape")) > MAX_RPC_PATH_BYTES:
            return f"header {Header.RPC_PATH} is longer than {MAX_RPC_PATH_BYTES} bytes"
        if has_control_characters(path):
            return f"header {Header.RPC_PATH} contains control characters"
    deadline = headers.get(Header.DEADLINE)
    if deadline is not None and not _finite_number(deadline):
        return f"header {Header.DEADLINE} is not a number (epoch milliseconds)"
    return None


def encodable(value: Any) -> Any:
    """`value` (decoded headers, a table or one value) as the AMQP encoder accepts it.

    pamqp decodes a long string that is not UTF-8 to `bytes`, but encodes only `str` as a
    string: such a request could be consumed but not republished (the orphan processor would
    requeue it forever). Bytes become a byte array (`x`), the same bytes on the wire.
    """
    if isinstance(value, bytes):
        return bytearray(value)
    if isinstance(value, Mapping):
        return {str(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(v) for v in value]
    return value


def _finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)
