"""Request ids that sort by time, and reading the ids foreign clients send.

`osrdyne.Client` gives every request a UUIDv7 (RFC 9562: 48 bits of Unix milliseconds first,
then random bits) in the AMQP `message_id` property: ids from any number of clients sort in
the order the requests were made, to the millisecond. osrdyne keeps it where it keeps a
request (the poison inventory, the key timeline, log lines) and orders by it. The client uses
the same id as the request's `correlation_id` (another client's correlation id stays its own).

The ids are made here rather than by a library (`uuid6.uuid7()` took 3-4 µs a call, most of it
reading the kernel's random source, on the client's hot path): RFC 9562's method 1, a 12-bit
counter after the milliseconds (ids of one process sort in the order they were made, even
within a millisecond: at most 4096 a millisecond before the clock part is moved on), then 62
random bits from a generator seeded by the kernel. They are unique and ordered, not secret
(nothing in the protocol needs them unguessable: a reply reaches only its caller's channel).

A `message_id` from another client is hostile input like any header: `request_id()` keeps it
only when it is short printable ASCII (at most `MAX_REQUEST_ID` characters), else the request
has no id (it is never logged or stored as sent). `order()` sorts UUIDv7 ids by time; requests
without one (no id, or an id of another form) come after them, in the order given (arrival).
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

#: Longest `message_id` kept (a UUID is 36 characters; other clients' ids may be longer).
MAX_REQUEST_ID = 128

_PRINTABLE = re.compile(rf"[\x21-\x7e]{{1,{MAX_REQUEST_ID}}}")

T = TypeVar("T")


_random = random.Random(os.urandom(32))
_lock = threading.Lock()
#: The milliseconds and counter of the last id made.
_last = [0, 0]
_COUNTER_MAX = 0xFFF
_VARIANT = 0b10 << 62
_RANDOM_BITS = (1 << 62) - 1


def new_request_id() -> str:
    """A new time-sortable id (UUIDv7, as text)."""
    ms = time.time_ns() // 1_000_000
    with _lock:
        last_ms, counter = _last
        if ms > last_ms:
            counter = _random.getrandbits(11)  # the lower half: room to count up
        elif counter < _COUNTER_MAX:
            ms, counter = last_ms, counter + 1
        else:
            ms, counter = last_ms + 1, _random.getrandbits(11)
        _last[0], _last[1] = ms, counter
        low = _random.getrandbits(62)
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7000 << 64 | counter << 64 | _VARIANT | low
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def request_id(value: Any) -> str | None:
    """The request id carried by a `message_id` value, None when there is none or it is not
    short printable ASCII."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str) and _PRINTABLE.fullmatch(value):
        return value
    return None


def uuid7_time_ms(value: str | None) -> int | None:
    """The Unix milliseconds of a UUIDv7 id, None for any other id."""
    if value is None:
        return None
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return None
    if parsed.version != 7:
        return None
    return parsed.int >> 80


def order(items: Iterable[T], id_of: Callable[[T], str | None]) -> list[T]:
    """`items` sorted by their UUIDv7 request ids (time, then the id's random bits); items
    without one after them, in their given order."""
    listed = list(items)

    def key(pair: tuple[int, T]) -> tuple[int, int, str, int]:
        index, item = pair
        rid = id_of(item)
        ms = uuid7_time_ms(rid)
        if ms is None:
            return (1, 0, "", index)
        return (0, ms, rid or "", index)

    return [item for _, item in sorted(enumerate(listed), key=key)]
