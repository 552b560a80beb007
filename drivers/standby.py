"""Standby workers waiting for a key, and the hand-off of a key to one of them (`base.Standby`).

A driver that keeps standby workers (started ahead of demand, not yet keyed) holds them in a
`StandbyPool`, oldest first, whatever a worker is to it (a container's id and name, a
supervised process). `take(key)` gives the key to the oldest one that takes it, through the
controller's `Assign` (docs/protocol.md, "Standby workers"): a worker whose queue is not there
yet stays for a later key; one whose assignment failed with an unknown outcome is discarded
(it must never serve two keys). What a taken worker becomes (a slot of its key's group, a
renamed container) and how the pool is filled again are the driver's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

from drivers import base

logger = logging.getLogger(__name__)

W = TypeVar("W")


class StandbyPool(Generic[W]):
    """The standby workers of one driver, oldest first, and the key hand-off."""

    def __init__(
        self,
        *,
        queue: Callable[[W], str],
        name: Callable[[W], str],
        discard: Callable[[W], Awaitable[None]],
    ) -> None:
        #: The standby queue a worker waits on.
        self._queue = queue
        #: The worker as the logs name it.
        self._name = name
        #: Stops a worker whose assignment has an unknown outcome.
        self._discard = discard
        self._waiting: list[W] = []
        self._taking: list[W] = []
        self._assign: base.Assign | None = None

    def attach(self, assign: base.Assign | None) -> None:
        """Assign keys through `assign` from now on; None: `take` takes none."""
        self._assign = assign

    @property
    def waiting(self) -> tuple[W, ...]:
        """The workers waiting for a key, oldest first."""
        return tuple(self._waiting)

    @property
    def taking(self) -> tuple[W, ...]:
        """The workers being given a key now (out of `waiting` meanwhile)."""
        return tuple(self._taking)

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, worker: W) -> None:
        """One more worker waiting, the newest."""
        self._waiting.append(worker)

    def replace(self, workers: Iterable[W]) -> None:
        """The workers that wait are these (a driver that read them again), oldest first;
        those being given a key now are left out (their `take` puts them back if they do not
        take it)."""
        self._waiting = [w for w in workers if w not in self._taking]

    def clear(self) -> list[W]:
        """Every waiting worker, out of the pool (the driver closing)."""
        waiting, self._waiting = self._waiting, []
        return waiting

    async def take(self, key: str) -> W | None:
        """The oldest waiting worker that took `key` (told through the controller's
        assignment), out of the pool; None when none did or no assignment is attached."""
        for worker in list(self._waiting):
            assign = self._assign
            if assign is None:
                return None
            if worker not in self._waiting:
                continue  # taken by another key meanwhile
            self._waiting.remove(worker)
            self._taking.append(worker)
            try:
                taken = await assign(self._queue(worker), key)
            except Exception as exc:  # the outcome is unknown: never let it serve twice
                logger.warning(
                    "assigning key %r to standby %s failed: %s", key, self._name(worker), exc
                )
                await self._discard(worker)
                continue
            finally:
                self._taking.remove(worker)
            if taken:
                logger.info("standby %s takes key %r", self._name(worker), key)
                return worker
            self._waiting.append(worker)  # not waiting yet: keep it for a later key
        return None
