"""What a handler raises to tell the worker what to do with a request.

    Exception
    ├── HandlerError     answer the caller with an error response (permanent failure)
    └── Requeue          give the request back to the queue (temporary: maybe another
                         worker, or later, can take it)

Any other exception escaping a handler is answered like a `HandlerError` built from it.
"""

from __future__ import annotations

from typing import Any


class HandlerError(Exception):
    """A permanent failure: the caller gets an error response with this message."""

    def __init__(self, message: str, *, details: Any = None, status: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: JSON-serialisable extra information put into the error body.
        self.details = details
        #: Overrides the worker's configured error status (`x-status`) when set.
        self.status = status


class Requeue(Exception):  # noqa: N818 - an instruction, not an error
    """A temporary refusal: `basic.reject` with requeue, after `delay` seconds."""

    def __init__(self, reason: str = "", *, delay: float = 0.0) -> None:
        super().__init__(reason)
        self.delay = delay
