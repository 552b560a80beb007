"""The contract between the controller and whatever runs worker groups.

A driver knows how to start, stop and list the worker groups of one pool, and nothing more:
no retries (the worker-group control loop converges again on its next pass), no state
decisions. `start` and `stop` must be idempotent, and `list` only lists. Drivers never import
each other; only `drivers.registry` picks one by name.

Three optional protocols let a driver say more, each found with `isinstance`:

- `Describes`: the workers of each group (pid, container or pod, restarts, last exit), for
  the status document;
- `Upgrades`: which listed groups run an older version or a half-done change; the
  worker-group loop plans their upgrade and applies it with `start`, which converges a group
  to the current version;
- `Capacity`: how many worker groups it can run at once (processes and memory for the
  subprocess driver, containers for docker); the controller refuses new keys beyond it;
- `Standby`: it keeps workers started ahead of demand, not yet keyed; `start(key)` gives one
  of them the key through the controller's `Assign` (docs/protocol.md, "Standby workers");
- `Unlisted`: it cannot see the groups it runs (noop: workers are started by hand), so its
  `list()` says nothing; the worker-group loop remembers what it started and stopped instead
  of starting every expected group again on every pass;
- `Sizes`: it runs a group as a number of workers it can change (`resize(key, n)`); the
  controller's group scaler decides the number (docs/drivers.md, "Group sizing").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from osrdyne import wire


class DriverError(Exception):
    """A driver could not do what it was asked; the control loop logs it and tries later."""


class DriverUnavailable(DriverError):
    """The engine behind the driver (Docker, Kubernetes API, ...) cannot be reached."""


class DriverRejected(DriverError):
    """The engine refused the request (bad configuration, quota, conflict)."""


class DriverConfigurationError(DriverError, ValueError):
    """The driver's settings cannot work (a missing section, an unknown kind)."""


@dataclasses.dataclass(frozen=True)
class PoolContext:
    """What every driver of a pool is constructed with, besides its own settings."""

    #: The pool's name; broker object names derive from it (`osrdyne.protocol.PoolNames`).
    pool: str
    #: The AMQP URI workers connect with (may differ from the controller's own, e.g. in k8s).
    amqp_uri: str

    @property
    def names(self) -> wire.PoolNames:
        return wire.PoolNames(self.pool)

    def environment(self, key: str, worker_id: str) -> dict[str, str]:
        """The protocol's worker environment for one worker of the group of `key`."""
        return wire.worker_environment(
            names=self.names, key=key, worker_id=worker_id, amqp_uri=self.amqp_uri
        )

    def standby_environment(self, worker_id: str) -> dict[str, str]:
        """The protocol's environment of a standby worker (no key yet)."""
        return wire.standby_environment(
            names=self.names, worker_id=worker_id, amqp_uri=self.amqp_uri
        )


#: Gives `key` to the standby worker waiting on the standby queue named first: True once the
#: broker confirmed the assignment reached that queue, False when it was not taken (no such
#: queue: the worker is not waiting yet, or is gone). Raises when the outcome is unknown.
Assign = Callable[[str, str], Awaitable[bool]]


@dataclasses.dataclass
class WorkerInfo:
    """What a driver knows of one worker of a group (the status document shows it)."""

    worker_id: str
    #: Process id (subprocess driver).
    pid: int | None = None
    #: Container or pod name (docker, kubernetes).
    name: str | None = None
    #: Exits followed by a restart.
    restarts: int = 0
    #: The last exit code; negative: killed by that signal.
    last_exit: int | None = None
    #: Started by an earlier controller process and adopted.
    adopted: bool = False


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


@runtime_checkable
class Describes(Protocol):
    """A driver that can describe the workers of its groups."""

    def describe(self) -> Mapping[str, Sequence[WorkerInfo]]:
        """The workers of each group, by key (no I/O: what the driver last saw)."""


@runtime_checkable
class Upgrades(Protocol):
    """A driver whose groups can fall behind its settings (a new image, more workers)."""

    def outdated(self) -> set[str]:
        """Keys of the groups the last `list()` found outdated or half-changed; `start(key)`
        brings each to the current version. No I/O: it reads what `list()` saw."""


@runtime_checkable
class Capacity(Protocol):
    """A driver that knows how many worker groups it can run at once."""

    def capacity(self) -> int | None:
        """Most groups it can run at once (None: no limit it knows of). No I/O."""


@runtime_checkable
class Standby(Protocol):
    """A driver that keeps standby workers: started ahead of demand, keyed on `start`."""

    def standby_workers(self) -> Sequence[WorkerInfo]:
        """The standby workers not yet keyed (no I/O)."""

    def attach(self, assign: Assign | None) -> None:
        """Assign keys through `assign` from now on (the leading controller's session);
        None: no session, `start` starts workers for their key as without standby."""


@runtime_checkable
class Unlisted(Protocol):
    """A driver that cannot list the groups it runs: `list()` is empty whatever runs."""

    def cannot_list(self) -> bool:
        """True: trust your own record of what `start` and `stop` did, not `list()`."""


@runtime_checkable
class Sizes(Protocol):
    """A driver that can run a group as `n` workers and change `n` while it runs."""

    async def resize(self, key: str, workers: int) -> None:
        """Make the running group of `key` have `workers` workers (at least 1), or as many
        as the driver's caps leave room for (`sizes()` says what it got). Removed workers
        drain first (SIGTERM: they finish what they hold). No-op for a key without a group;
        a group started later starts at the driver's own count. Idempotent."""

    def sizes(self) -> Mapping[str, int]:
        """The workers each running group is asked to have (no I/O)."""
