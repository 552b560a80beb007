"""Keys and headers are client-chosen text: no control character reaches a log line as is
(an ESC drives the terminal that shows it, a newline forges a line), in both formats."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from osrdyne.ops import logs

HOSTILE = "key\x1b[2J\nFAKE LINE\u202eevil\x07"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    yield stream
    root.handlers[:], level = saved
    root.setLevel(level)


@pytest.mark.parametrize("json_format", [False, True], ids=["plain", "json"])
def test_control_characters_are_escaped_in_every_field(
    captured: io.StringIO, json_format: bool
) -> None:
    logs.configure(level="INFO", json_format=json_format)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(captured)
    logging.getLogger("osrdyne.test").warning(
        "request for %s", HOSTILE, extra=logs.fields(pool="p", key=HOSTILE)
    )
    line = captured.getvalue()
    assert line.count("\n") == 1 and line.endswith("\n")
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in line
    assert "\\x1b[2J" in line and "\\u202e" in line
    if json_format:
        doc = json.loads(line)
        assert doc["key"] == HOSTILE.encode("unicode_escape").decode().replace("\\n", "\\n")
