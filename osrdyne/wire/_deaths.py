"""Reading RabbitMQ's dead-lettering headers (`x-death`, `x-first-death-reason`) into plain
Python values, for the dead-letter responder and the poison inventory."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from osrdyne.wire._headers import Header
from osrdyne.wire._text import text


@dataclasses.dataclass(frozen=True)
class Death:
    """Why and where a request died first, as the broker recorded it."""

    reason: str
    key: str
    queue: str | None
    count: int | None
    time: Any

    @classmethod
    def of(cls, headers: Mapping[str, Any] | None, routing_key: str | None) -> Death:
        """Read the death headers, whatever shape a client or a broker gave them: a value of
        an unexpected type reads as unknown, never as an error."""
        headers = headers if isinstance(headers, Mapping) else {}
        deaths = headers.get(Header.DEATH)
        # x-death is a list of tables, most recent first; the first death is the last entry.
        last = deaths[-1] if isinstance(deaths, list) and deaths else None
        first: Mapping[str, Any] = last if isinstance(last, Mapping) else {}
        keys = first.get("routing-keys")
        key = keys[0] if isinstance(keys, list) and keys else routing_key
        count = first.get("count")
        died_at = first.get("time")
        return cls(
            reason=text(headers.get(Header.FIRST_DEATH_REASON) or first.get("reason")) or "unknown",
            key=text(key) or "",
            queue=text(first.get("queue")),
            count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            time=died_at if isinstance(died_at, datetime.datetime | int | float) else None,
        )
