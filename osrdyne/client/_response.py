"""A response as the client sees it: status, body, headers, and whether more will follow."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from osrdyne import exceptions
from osrdyne.wire import Header, Status, text


@dataclasses.dataclass(frozen=True)
class Response:
    #: `x-status`: `ok`, `progress` (interim), the worker's error status, or why the request
    #: died.
    status: str
    body: bytes
    headers: Mapping[str, Any]
    correlation_id: str | None
    #: True for an interim message (progress); the final response follows.
    interim: bool = False
    #: The id the client gave the request (`message_id`: UUIDv7, sorts by time).
    request_id: str | None = None

    @classmethod
    def from_message(
        cls,
        body: bytes,
        headers: Mapping[str, Any] | None,
        correlation_id: str | None,
        request_id: str | None = None,
    ) -> Response:
        headers = dict(headers or {})
        status = text(headers.get(Header.STATUS)) or ""
        return cls(
            status=status,
            body=body,
            headers=headers,
            correlation_id=correlation_id,
            request_id=request_id,
            # `progress` is interim by itself: it is never the answer, whatever the headers.
            interim=bool(headers.get(Header.NON_TERMINATING)) or status == Status.PROGRESS,
        )

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)

    def raise_for_status(self) -> Response:
        """Raise `WorkerFailed` or `RequestDead` unless the status is `ok`; return self."""
        if self.ok:
            return self
        dead = {s.value for s in Status} - {Status.OK, Status.WORKER_ERROR, Status.PROGRESS}
        if self.status in dead:
            raise exceptions.RequestDead(self)
        raise exceptions.WorkerFailed(self)
