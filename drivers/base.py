"""The contract between the controller and whatever runs worker groups.

A driver knows how to start, stop and list the worker groups of one pool, and nothing more:
no retries (the worker-group control loop converges again on its next pass), no state
decisions. `start` and `stop` must be idempotent. Drivers never import each other; only the
CLI wiring (`drivers.registry`) picks one by name.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from osrdyne import protocol


class DriverError(Exception):
    """A driver could not do what it was asked; the control loop logs it and tries later."""


class DriverUnavailable(DriverError):
    """The engine behind the driver (Docker, Kubernetes API, ...) cannot be reached."""


class DriverRejected(DriverError):
    """The engine refused the request (bad configuration, quota, conflict)."""


@dataclasses.dataclass(frozen=True)
class PoolContext:
    """What every driver of a pool is constructed with, besides its own settings."""

    #: The pool's name; broker object names derive from it (`osrdyne.protocol.PoolNames`).
    pool: str
    #: The AMQP URI workers connect with (may differ from the controller's own, e.g. in k8s).
    amqp_uri: str

    @property
    def names(self) -> protocol.PoolNames:
        return protocol.PoolNames(self.pool)

    def environment(self, key: str, worker_id: str) -> dict[str, str]:
        """The protocol's worker environment for one worker of the group of `key`."""
        return protocol.worker_environment(
            names=self.names, key=key, worker_id=worker_id, amqp_uri=self.amqp_uri
        )


@runtime_checkable
class Driver(Protocol):
    """Runs the worker groups of one pool, keyed by worker key."""

    async def start(self, key: str) -> None:
        """Make sure the worker group of `key` runs. Idempotent."""

    async def stop(self, key: str) -> None:
        """Make sure the worker group of `key` does not run. Idempotent."""

    async def list(self) -> set[str]:
        """The keys of the worker groups that currently exist (running or starting)."""

    async def close(self) -> None:
        """Release the driver's resources. Drivers that own their workers stop them here."""
