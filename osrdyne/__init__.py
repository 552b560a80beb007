"""osrdyne: a scalable asynchronous RPC dispatcher on RabbitMQ.

Clients call keyed workers (`Client`, `SyncClient`); operators run a `Controller` per pool
(usually through the `osrdyne` command). Workers are written with `worker_sdk`.

The package is laid out by concept: `osrdyne.wire` (the protocol every part shares),
`osrdyne.client`, `osrdyne.controller`, and `osrdyne.ops` (the operator surface).
"""

import importlib.metadata
from typing import TYPE_CHECKING, Any

from osrdyne.exceptions import (
    BrokerUnsuitable,
    ClientError,
    ConfigurationError,
    ConnectionLost,
    OsrdyneError,
    PoolNotFound,
    RequestDead,
    RequestRefused,
    RequestTimeout,
    RequestTooLarge,
    ResponseError,
    WorkerFailed,
)
from osrdyne.wire import Event, Header, PoolNames, Status

if TYPE_CHECKING:
    from osrdyne.client import Client, Response, SyncClient

#: The installed version (pyproject.toml is the one place it is written).
__version__ = importlib.metadata.version("osrdyne")

#: Imported on first use: workers import `osrdyne.wire`, and must not pay for the client.
_LAZY = {"Client", "Response", "SyncClient"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import osrdyne.client

        return getattr(osrdyne.client, name)
    raise AttributeError(f"module 'osrdyne' has no attribute {name!r}")


__all__ = [
    "BrokerUnsuitable",
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
    "RequestRefused",
    "RequestTimeout",
    "RequestTooLarge",
    "Response",
    "ResponseError",
    "Status",
    "SyncClient",
    "WorkerFailed",
]
