"""AMQP message properties encoded in one pass: the client's and the workers' hot path.

pamqp encodes `Basic.Properties` generically: for each of the 14 properties it looks up the
property's AMQP type by name, then dispatches on it (`encode.by_type`). A request of osrdyne
carries seven of them (a header table among them), and their encoding was the largest part of
building a request frame after the publish itself (py-spy, `bench/dispatch_bench.py`'s
client: about 5 % of the client's CPU, against 2 % for the three properties of a bare
aio-pika RPC). `Properties` writes the same bytes directly; the header table's values and
anything out of the ordinary (a string over 255 bytes, a value of another type) go through
pamqp's own encoders, so what reaches the broker, and every error, is pamqp's.
`tests/client/test_properties.py` compares both encodings over every property and value type.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pamqp.commands
import pamqp.encode

_U16 = struct.Struct(">H").pack
_U32 = struct.Struct(">I").pack
_U64 = struct.Struct(">Q").pack
_OCTET = struct.Struct("B").pack

#: (property, flag, how it is encoded), in the order of the AMQP specification.
_SHORT, _TABLE, _OCTET_KIND, _TIMESTAMP = range(4)
_LAYOUT = (
    ("content_type", 0x8000, _SHORT),
    ("content_encoding", 0x4000, _SHORT),
    ("headers", 0x2000, _TABLE),
    ("delivery_mode", 0x1000, _OCTET_KIND),
    ("priority", 0x0800, _OCTET_KIND),
    ("correlation_id", 0x0400, _SHORT),
    ("reply_to", 0x0200, _SHORT),
    ("expiration", 0x0100, _SHORT),
    ("message_id", 0x0080, _SHORT),
    ("timestamp", 0x0040, _TIMESTAMP),
    ("message_type", 0x0020, _SHORT),
    ("user_id", 0x0010, _SHORT),
    ("app_id", 0x0008, _SHORT),
    ("cluster_id", 0x0004, _SHORT),
)


class _Unusual(Exception):
    """A value the one-pass encoder leaves to pamqp."""


class Properties(pamqp.commands.Basic.Properties):
    """`pamqp.commands.Basic.Properties` (what aiormq publishes), encoded in one pass."""

    def marshal(self) -> bytes:
        try:
            return _marshal(self)
        except (_Unusual, UnicodeError):
            return super().marshal()  # pamqp's encoding, or its error


def _marshal(properties: Properties) -> bytes:
    flags = 0
    parts: list[bytes] = []
    for name, flag, kind in _LAYOUT:
        value = getattr(properties, name)
        if value is None or value == "":
            continue
        flags |= flag
        if kind == _SHORT:
            parts.append(_short(value))
        elif kind == _TABLE:
            parts.append(_table(value))
        elif kind == _OCTET_KIND:
            if type(value) is not int or not 0 <= value <= 255:
                raise _Unusual
            parts.append(_OCTET(value))
        else:
            parts.append(_timestamp(value))
    return _U16(flags) + b"".join(parts)


def _short(value: Any) -> bytes:
    if type(value) is not str:
        raise _Unusual
    data = value.encode()
    if len(data) > 255:
        raise _Unusual
    return _OCTET(len(data)) + data


def _table(value: Any) -> bytes:
    if type(value) is not dict:
        raise _Unusual
    if not value:
        return b"\x00\x00\x00\x00"
    parts: list[bytes] = []
    for key, item in sorted(value.items()):  # pamqp sorts a table's fields too
        name = _short(key)
        if len(name) > 129:  # pamqp truncates a field name over 128 bytes
            raise _Unusual
        parts.append(name)
        if type(item) is str:
            data = item.encode()
            parts.append(b"S" + _U32(len(data)) + data)
        else:
            parts.append(pamqp.encode.encode_table_value(item))
    table = b"".join(parts)
    return _U32(len(table)) + table


def _timestamp(value: Any) -> bytes:
    if type(value) is not datetime.datetime or value.tzinfo is not datetime.UTC:
        raise _Unusual
    return _U64(int(value.timestamp()))
