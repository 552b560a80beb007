"""Text from the wire: header values and keys arrive as whatever the sender made of them."""

from __future__ import annotations

import re
from typing import Any

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def has_control_characters(value: str) -> bool:
    """True when `value` holds an ASCII control character (C0 or DEL)."""
    return _CONTROL_CHARACTERS.search(value) is not None


def text(value: Any) -> str | None:
    """A header value as text: bytes decoded as UTF-8 (invalid bytes replaced), None kept,
    anything else through `str()`."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode(errors="replace")
    return value if isinstance(value, str) else str(value)
