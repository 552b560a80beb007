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


#: Longest reason a worker gives for a failed start, in characters (once cleaned).
MAX_REASON_CHARS = 500

_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):([^@\s]*)@")
#: `password=...`, `token: ...` and the like: the value goes, the name stays.
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b([\w-]*(?:password|passwd|pwd|secret|token|api[_-]?key|credentials?)[\w-]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)"
)
#: C0 and C1 controls, DEL, and the Unicode format characters that reorder text (bidi).
_ANY_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+")


def clean_reason(value: Any, *, limit: int = MAX_REASON_CHARS) -> str | None:
    """A failure's reason as it may travel and be shown: text (see `text`), URL passwords and
    `secret=value` assignments masked, every run of control characters one space, at most
    `limit` characters (an ellipsis marks a cut). Both ends use it: the worker before it
    reports, the controller on what it hears (a report is untrusted). None for nothing."""
    found = text(value)
    if found is None:
        return None
    found = found[: limit * 4]  # bound the work before the regular expressions
    found = _URL_PASSWORD.sub(r"\1:***@", found)
    found = _SECRET_ASSIGNMENT.sub(r"\1\2***", found)
    found = _ANY_CONTROL.sub(" ", found).strip()
    if len(found) > limit:
        found = found[: limit - 1].rstrip() + "…"
    return found or None
