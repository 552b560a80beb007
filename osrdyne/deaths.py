"""Reading RabbitMQ's dead-lettering headers (`x-death`, `x-first-death-reason`) into plain
Python values, for the dead-letter responder and the poison inventory."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from osrdyne.protocol import Header


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


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
        headers = headers or {}
        deaths: list[Any] = list(headers.get(Header.DEATH) or [])
        # x-death is most recent first; the first death is the last entry.
        first: Mapping[str, Any] = deaths[-1] if deaths and isinstance(deaths[-1], dict) else {}
        keys = first.get("routing-keys") or [routing_key or ""]
        count = first.get("count")
        return cls(
            reason=_text(headers.get(Header.FIRST_DEATH_REASON) or first.get("reason"))
            or "unknown",
            key=_text(keys[0]) or "",
            queue=_text(first.get("queue")),
            count=int(count) if isinstance(count, int) else None,
            time=first.get("time"),
        )
