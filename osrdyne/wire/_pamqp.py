"""What osrdyne changes in pamqp, the AMQP codec under aio-pika, and why.

Applied once, when `osrdyne.wire` is imported; neither change alters what pamqp does for any
other code of the process:

* pamqp's short-string decoder raises on bytes that are not UTF-8; osrdyne's keeps them as
  surrogate escapes (valid UTF-8 decodes exactly as before).
* pamqp refuses queue names outside the AMQP spec's ASCII alphabet. osrdyne's own request
  queues are named in that alphabet (`_queue_names`), but osrdyne 0.1 named them after raw
  keys, and the controller must still reach those to retire them after an upgrade. Inside
  `any_queue_name()` (the current task only) pamqp lets any name through; everywhere else
  its check is the original one.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from typing import Any

import pamqp.common
import pamqp.constants
import pamqp.decode

_ANY_QUEUE_NAME: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "osrdyne_any_queue_name", default=False
)


class _QueueNameCheck:
    """pamqp's queue-name pattern, relaxed only where `any_queue_name()` says so."""

    def __init__(self, original: re.Pattern[str]) -> None:
        self.original = original

    def fullmatch(self, name: str, *args: Any) -> Any:
        if _ANY_QUEUE_NAME.get():
            return True
        return self.original.fullmatch(name, *args)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.original, attribute)


@contextlib.contextmanager
def any_queue_name() -> Iterator[None]:
    """Let pamqp send any queue name within this block, in this task only: for the queues
    osrdyne 0.1 named after raw keys (RabbitMQ accepts any UTF-8 name; pamqp does not)."""
    token = _ANY_QUEUE_NAME.set(True)
    try:
        yield
    finally:
        _ANY_QUEUE_NAME.reset(token)


def _decode_short_str_leniently(value: bytes) -> tuple[int, str]:
    """pamqp's short-string decoder, but bytes that are not UTF-8 are kept as surrogate escapes
    instead of raising in the middle of a frame (which would drop the whole connection, and
    the message would be redelivered to crash the next one: a poison pill)."""
    length = pamqp.common.Struct.byte.unpack(value[0:1])[0]
    return length + 1, value[1 : length + 1].decode("utf-8", errors="surrogateescape")


def apply() -> None:
    # A routing key that is not UTF-8 (other clients can send one) reaches the controller,
    # which answers it `invalid_key` (see `key_problem`).
    pamqp.decode.short_str = _decode_short_str_leniently
    pamqp.decode.METHODS["shortstr"] = _decode_short_str_leniently
    check = pamqp.constants.DOMAIN_REGEX["queue-name"]
    if not isinstance(check, _QueueNameCheck):
        pamqp.constants.DOMAIN_REGEX["queue-name"] = _QueueNameCheck(check)  # type: ignore[assignment]
