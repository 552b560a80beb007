"""`wire.Properties` encodes AMQP properties in one pass: the same bytes as pamqp's generic
encoder, for every property and every kind of header value, and pamqp's error where pamqp
refuses (the encoder hands anything out of the ordinary to pamqp)."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pamqp.commands
import pytest

from osrdyne import wire

PLUS_TWO = datetime.timezone(datetime.timedelta(hours=2))
UTC_NOW = datetime.datetime(2026, 12, 2, 1, 2, 3, 456789, tzinfo=datetime.UTC)
HEADER_VALUES: list[Any] = [
    "text",
    "é漢字",
    "",
    0,
    -1,
    127,
    128,
    -129,
    40_000,
    70_000,
    2**31,
    2**40,
    -(2**40),
    True,
    False,
    1.5,
    decimal.Decimal("1.25"),
    None,
    bytearray(b"\xff\x00"),
    [1, "a", None],
    {"nested": {"deeper": 1}},
    UTC_NOW,
]
PROPERTIES: list[dict[str, Any]] = [
    {},
    {"delivery_mode": 2},
    {"content_type": "application/json", "correlation_id": "c", "reply_to": wire.DIRECT_REPLY_TO},
    {
        "content_type": "text/plain; charset=utf-8",
        "content_encoding": "gzip",
        "headers": {"x-deadline": 1796173862999, "x-rpc-path": "query", "traceparent": "00-ab"},
        "delivery_mode": 2,
        "priority": 9,
        "correlation_id": wire.new_request_id(),
        "reply_to": "reply-queue",
        "expiration": "30000",
        "message_id": wire.new_request_id(),
        "timestamp": UTC_NOW,
        "message_type": "t",
        "user_id": "guest",
        "app_id": "osrdyne",
    },
    {"headers": {}},
    {"headers": {f"k{i}": v for i, v in enumerate(HEADER_VALUES)}},
    {"headers": {"z": 1, "a": 2, "m": "x"}},  # sorted, as pamqp does
    {"headers": {"k" * 200: 1}},  # a field name pamqp truncates to 128 bytes
    {"correlation_id": "é" * 127},  # 254 bytes
    {"expiration": ""},  # an empty string is left out, as pamqp does
    {"timestamp": datetime.datetime(2026, 1, 1, 12, 0)},  # naive: taken as UTC
    {"timestamp": datetime.datetime(2026, 1, 1, 12, 0, tzinfo=PLUS_TWO)},
]


@pytest.mark.parametrize("values", PROPERTIES, ids=[f"p{i}" for i in range(len(PROPERTIES))])
def test_the_same_bytes_as_pamqp(values: dict[str, Any]) -> None:
    ours = wire.Properties(**values)
    theirs = pamqp.commands.Basic.Properties(**values)
    assert ours.marshal() == theirs.marshal()
    decoded = pamqp.commands.Basic.Properties()
    decoded.unmarshal(int.from_bytes(ours.marshal()[:2], "big"), ours.marshal()[2:])
    for name, value in values.items():
        if name in ("headers", "timestamp") or value == "":
            continue
        assert getattr(decoded, name) == value


@pytest.mark.parametrize(
    "values",
    [
        {"correlation_id": "x" * 256},  # over a short string's 255 bytes
        {"headers": {"bad": object()}},
        {"reply_to": "\udcff"},  # not encodable as UTF-8
        {"priority": 256},
    ],
    ids=["long short string", "unknown value type", "lone surrogate", "octet out of range"],
)
def test_pamqps_error_where_pamqp_refuses(values: dict[str, Any]) -> None:
    with pytest.raises(Exception) as theirs:
        pamqp.commands.Basic.Properties(**values).marshal()
    with pytest.raises(type(theirs.value)):
        wire.Properties(**values).marshal()
