"""Request ids that sort by time, and reading the ids foreign clients send.

`osrdyne.Client` gives every request a UUIDv7 (RFC 9562: 48 bits of Unix milliseconds first,
then random bits) in the AMQP `message_id` property, from the `uuid6` library: ids from any
number of clients sort in the order the requests were made, to the millisecond. osrdyne keeps
it where it keeps a request (the poison inventory, the key timeline, log lines) and orders by
it. `correlation_id` stays the client's own.

A `message_id` from another client is hostile input like any header: `request_id()` keeps it
only when it is short printable ASCII (at most `MAX_REQUEST_ID` characters), else the request
has no id (it is never logged or stored as sent). `order()` sorts UUIDv7 ids by time; requests
without one (no id, or an id of another form) come after them, in the order given (arrival).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import uuid6

#: Longest `message_id` kept (a UUID is 36 characters; other clients' ids may be longer).
MAX_REQUEST_ID = 128

_PRINTABLE = re.compile(rf"[\x21-\x7e]{{1,{MAX_REQUEST_ID}}}")

T = TypeVar("T")


def new_request_id() -> str:
    """A new time-sortable id (UUIDv7, as text)."""
    return str(uuid6.uuid7())


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
