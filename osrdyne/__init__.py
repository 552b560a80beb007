"""osrdyne: a scalable asynchronous RPC dispatcher on RabbitMQ.

Clients call keyed workers (`Client`, `SyncClient`); operators run a `Controller` per pool
(usually through the `osrdyne` command). Workers are written with `worker_sdk`.
"""

from typing import TYPE_CHECKING, Any

from osrdyne.exceptions import (
    ClientError,
    ConfigurationError,
    ConnectionLost,
    OsrdyneError,
    PoolNotFound,
    RequestDead,
    RequestTimeout,
    RequestTooLarge,
    ResponseError,
    WorkerFailed,
)
from osrdyne.protocol import Event, Header, PoolNames, Status
from osrdyne.response import Response

if TYPE_CHECKING:
    from osrdyne.client import Client
    from osrdyne.sync_client import SyncClient

#: Imported on first use: workers import `osrdyne.protocol`, and must not pay for the client.
_LAZY = {"Client": "osrdyne.client", "SyncClient": "osrdyne.sync_client"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'osrdyne' has no attribute {name!r}")


__all__ = [
    "Client",
    "ClientError",
    "ConfigurationError",
    "ConnectionLost",
    "Event",
    "Header",
    "OsrdyneError",
    "PoolNames",
    "PoolNotFound",
    "RequestDead",
    "RequestTimeout",
    "RequestTooLarge",
    "Response",
    "ResponseError",
    "Status",
    "SyncClient",
    "WorkerFailed",
]
