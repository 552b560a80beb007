"""Log set-up for the command line: plain lines or one JSON object per line (structlog
renders both, over the standard library's logging that every module uses).

Lines about a request or a group carry fields of their own (`pool`, `key`, `correlation_id`,
`generation`...), passed as the standard library's `extra={...}` and rendered as fields by
structlog's `ExtraAdder`. Two rules hold on every line, whatever logged it and in both
formats: passwords in URLs (`amqp://user:secret@host`) are masked, and control characters
(keys and headers are client-chosen text: an ESC or a newline could forge a line or drive a
terminal) are written as Python escapes, tracebacks excepted.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):([^@\s]*)@")
#: C0 and C1 controls, DEL, and the Unicode format characters that reorder text (bidi).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by `***`."""
    return _URL_PASSWORD.sub(r"\1:***@", text)


def escape_controls(text: str) -> str:
    """`text` with every control character written as its Python escape (ESC as backslash,
    x, 1, b)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def redact_secrets(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: mask URL passwords and escape control characters in every
    string field of a line (the rendered traceback keeps its newlines)."""
    for name, value in event_dict.items():
        if isinstance(value, str):
            value = redact(value)
            event_dict[name] = value if name == "exception" else escape_controls(value)
    return event_dict


def fields(*, pool: str, **more: Any) -> dict[str, Any]:
    """`extra=` for a log line about a request or a group (None values left out)."""
    return {"pool": pool, **{k: v for k, v in more.items() if v is not None}}


def _structlog() -> Any:
    """structlog, imported without rich when nothing imported rich before.

    `structlog.dev` imports rich (about 50 ms, a sixth of a worker's start) only to draw
    tracebacks, and ours are rendered as plain text before any renderer sees them
    (`format_exc_info` below). rich stays importable afterwards for whoever wants it."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        return importlib.import_module("structlog")
    sys.modules["rich"] = None  # type: ignore[assignment]  # ImportError inside structlog.dev
    try:
        return importlib.import_module("structlog")
    finally:
        del sys.modules["rich"]


def configure(*, level: str = "INFO", json_format: bool = False) -> None:
    structlog = _structlog()
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_format
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            redact_secrets,
            renderer,
        ],
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
        ],
    )
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiormq", "aio_pika", "httpx", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
