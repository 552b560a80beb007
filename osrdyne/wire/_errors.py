"""The JSON body of every error answer, whoever sends it (the controller or a worker).

A client that reads only bodies must tell an error from an answer, and read every error the
same way: each error body is one JSON object with exactly the fields below, `null` where the
sender does not know the value (docs/protocol.md). What only one sender knows goes into
`details` (a worker's traceback, the dead-letter history of a request).
"""

from __future__ import annotations

import json
import time
from typing import Any

#: Every field of an error body, in the order they are written.
ERROR_FIELDS = ("status", "error", "pool", "key", "path", "worker_id", "time", "details")


def error_document(
    *,
    status: str,
    error: str,
    pool: str | None,
    key: str | None,
    path: str | None = None,
    worker_id: str | None = None,
    details: Any = None,
    at: float | None = None,
) -> dict[str, Any]:
    """The error body as a dict: `status` repeats `x-status`, `error` says what happened in
    words, `time` is when the answer was made (epoch seconds)."""
    return {
        "status": status,
        "error": error,
        "pool": pool,
        "key": key,
        "path": path,
        "worker_id": worker_id,
        "time": time.time() if at is None else at,
        "details": details,
    }


def error_body(**fields: Any) -> bytes:
    """`error_document(**fields)` as JSON (values JSON cannot hold are written as text)."""
    return json.dumps(error_document(**fields), default=str).encode()
