"""Errors of osrdyne, split by what the caller should do about them.

    OsrdyneError
    ├── ClientError                  a call did not produce an answer
    │   ├── PoolNotFound             the pool's request exchange does not exist: is osrdyne
    │   │                            running for this pool? (fix the setup)
    │   ├── RequestTooLarge          the body exceeds the broker's message size limit
    │   ├── RequestRefused           the broker did not take the request (negative publisher
    │   │                            confirm: e.g. its queue electing a leader after a node
    │   │                            loss); nothing was queued (retry)
    │   ├── RequestTimeout           no final answer in time (retry or give up; a late answer
    │   │                            is dropped and counted)
    │   └── ConnectionLost           the connection dropped while waiting; with direct
    │                                reply-to the answer is lost (retry)
    ├── ResponseError                an answer came, but not `ok` (`Response.raise_for_status`)
    │   ├── WorkerFailed             the worker's handler failed (fix the request or worker)
    │   └── RequestDead              the request died before a worker answered: expired,
    │                                rejected, maxlen, delivery_limit, invalid_key,
    │                                overloaded, start_failed (its group cannot start)
    ├── ConfigurationError           settings are invalid (fix the configuration)
    └── BrokerUnsuitable             the broker cannot serve a pool as it is configured: its
                                     management API collects no statistics (fix the broker;
                                     the controller tries again, session after session)

Driver errors live with the drivers (`drivers.DriverError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Answer(Protocol):
    """What a `ResponseError` holds: the client's `osrdyne.Response` (described here, not
    imported: the client imports this module, and errors sit below it)."""

    @property
    def status(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, Any]: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def interim(self) -> bool: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def ok(self) -> bool: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...


class OsrdyneError(Exception):
    """Base of every osrdyne error."""


class ConfigurationError(OsrdyneError):
    """The settings cannot work (unknown driver, missing command...)."""


class BrokerUnsuitable(OsrdyneError):
    """The broker cannot serve a pool as it is configured (its management API collects no
    statistics: no queue depths, no node figures)."""


class ClientError(OsrdyneError):
    """A call did not produce an answer."""


class PoolNotFound(ClientError):
    """The pool's request exchange does not exist."""


class RequestTooLarge(ClientError):
    """The request body is larger than the client's `max_body` (the broker would refuse it)."""


class RequestRefused(ClientError):
    """The broker nacked the request: it was not queued, and will not be answered."""


class RequestTimeout(ClientError):
    """No final answer arrived within the call's timeout."""


class ConnectionLost(ClientError):
    """The connection dropped while the call was waiting for its answer."""


class ResponseError(OsrdyneError):
    """An answer whose status is not `ok`."""

    def __init__(self, response: Answer) -> None:
        super().__init__(f"request answered with status {response.status!r}: {response.text}")
        self.response = response


class WorkerFailed(ResponseError):
    """The worker's handler failed on this request."""


class RequestDead(ResponseError):
    """The request died before any worker answered it (dead-lettered or refused)."""
