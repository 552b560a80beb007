"""The pool state tracker: which worker groups should exist, and how far along they are.

The expected state maps each key to `ACTIVE` (queue bound, group running) or `UNBOUND` (queue
unbound, group still running so it can drain). It is stamped with a 64-bit generation that
grows on every change; the control loops subscribe to it through a `Watch`.

    (none) --require--> ACTIVE --unbind_delay without activity--> UNBOUND
    UNBOUND --stop_delay--> (none)          UNBOUND --require--> ACTIVE
    ACTIVE or UNBOUND --stop(key, drain)--> UNBOUND, (none) after `drain`

`require(key)` is the only way in: orphans, activity and an operator's warm call it.
`stop(key)` is an operator's shortcut through the same two stages: the queue is unbound now
and the group stopped after `drain` seconds, unless a request or its workers' activity makes
it Active again first, as for any Unbound group. Each change is noted in the key's history
(`history`) when one is given. Time is a parameter, so the tracker's logic is tested without
sleeping.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
import types
from collections.abc import Callable, Iterable

from osrdyne.controller._decisions.history import EventKind, KeyHistory
from osrdyne.controller._decisions.pool_state import MAX_GENERATION, GroupStatus, PoolState
from osrdyne.controller._effects.watch import Watch

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Deadlines:
    status: GroupStatus
    active_until: float
    stop_at: float = float("inf")
    #: When it was unbound (how long it has been, in the log line of its stop).
    unbound_at: float = float("inf")


class PoolStateTracker:
    def __init__(
        self,
        *,
        unbind_delay: float,
        stop_delay: float,
        initial: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        history: KeyHistory | None = None,
    ) -> None:
        self.unbind_delay = unbind_delay
        self.stop_delay = stop_delay
        self._clock = clock
        self._history = history
        now = clock()
        self._groups = {key: _Deadlines(GroupStatus.ACTIVE, now + unbind_delay) for key in initial}
        #: Each group's status, kept with `_groups`: a snapshot is a copy of it (a C-speed
        #: dict copy: a burst of thousands of new keys publishes thousands of snapshots).
        self._statuses = {key: g.status for key, g in self._groups.items()}
        #: No deadline falls before this (it may be earlier than the first one: then `advance`
        #: scans for nothing). `advance` scans every group only once it has passed, so a burst
        #: of `require`s, each waking the tracker, does not scan thousands of groups each time.
        self._next = now + unbind_delay if self._groups else math.inf
        for key in self._groups:
            self._note(key, EventKind.ADOPTED, "request queue found at the start of the session")
        self._generation = 1
        #: Groups that left the expected state so far (caches of what depends on the
        #: expected keys know nothing was removed while this stays the same).
        self.removals = 0
        self.state: Watch[PoolState] = Watch(self._snapshot())
        self._wake = asyncio.Event()

    @property
    def generation(self) -> int:
        return self._generation

    def require(self, key: str, *, extra_lifetime: float = 0.0, cause: str = "a request") -> int:
        """Make the group of `key` Active for at least `unbind_delay + extra_lifetime` from now.

        Returns the generation from which the group is Active: once the request-queue loop
        has reached it, the key's queue exists and is bound. `cause` says why, in the key's
        history.
        """
        until = self._clock() + self.unbind_delay + extra_lifetime
        group = self._groups.get(key)
        if group is not None and group.status is GroupStatus.ACTIVE:
            group.active_until = max(group.active_until, until)
            return self._generation
        if group is None:
            logger.info("worker group %r required", key)
            self._note(key, EventKind.REQUIRED, f"new group, for {cause}")
        else:
            logger.info("worker group %r active again", key)
            self._note(key, EventKind.ACTIVE_AGAIN, f"bound again, for {cause}")
        self._groups[key] = _Deadlines(GroupStatus.ACTIVE, until)
        self._statuses[key] = GroupStatus.ACTIVE
        self._next = min(self._next, until)
        self._publish()
        self._wake.set()
        return self._generation

    def stop(self, key: str, *, drain: float) -> int | None:
        """Unbind the group of `key` now and stop it after `drain` seconds (at most
        `stop_delay`): the two stages of an idle group's stop, without waiting for it to be
        idle. A request or activity before then makes it Active again, as for any Unbound
        group. Returns the generation from which it is Unbound; None when it has no group."""
        group = self._groups.get(key)
        if group is None:
            return None
        drain = min(max(0.0, drain), self.stop_delay)
        stop_at = self._clock() + drain
        self._next = min(self._next, stop_at)
        if group.status is GroupStatus.UNBOUND:
            if stop_at < group.stop_at:
                group.stop_at = stop_at
                self._wake.set()
            return self._generation
        group.status, group.stop_at, group.unbound_at = (
            GroupStatus.UNBOUND,
            stop_at,
            stop_at - drain,
        )
        self._statuses[key] = GroupStatus.UNBOUND
        logger.info("worker group %r stopped by an operator: unbind", key)
        self._note(key, EventKind.UNBOUND, f"stopped by an operator: stops in {drain:.0f}s")
        self._publish()
        self._wake.set()
        return self._generation

    def advance(self) -> float | None:
        """Apply the deadlines that passed; return when the next one falls (None: none)."""
        now = self._clock()
        if now < self._next:
            return None if math.isinf(self._next) else self._next
        changed = False
        for key, group in list(self._groups.items()):
            if group.status is GroupStatus.ACTIVE and group.active_until <= now:
                group.status, group.stop_at = GroupStatus.UNBOUND, now + self.stop_delay
                self._statuses[key] = GroupStatus.UNBOUND
                group.unbound_at = now
                logger.info("worker group %r idle for %.0fs: unbind", key, self.unbind_delay)
                self._note(key, EventKind.UNBOUND, f"idle for {self.unbind_delay:.0f}s")
                changed = True
            if group.status is GroupStatus.UNBOUND and group.stop_at <= now:
                del self._groups[key]
                del self._statuses[key]
                self.removals += 1
                logger.info("worker group %r unbound for %.0fs: stop", key, now - group.unbound_at)
                self._note(key, EventKind.STOPPED, "unbound long enough: workers stopped")
                changed = True
        if changed:
            self._publish()
        upcoming = [
            g.active_until if g.status is GroupStatus.ACTIVE else g.stop_at
            for g in self._groups.values()
        ]
        self._next = min(upcoming) if upcoming else math.inf
        return min(upcoming) if upcoming else None

    async def run(self) -> None:
        """Move groups along their life cycle as their deadlines pass."""
        while True:
            self._wake.clear()
            upcoming = self.advance()
            timeout = None if upcoming is None else max(0.0, upcoming - self._clock())
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _note(self, key: str, kind: EventKind, detail: str) -> None:
        if self._history is not None:
            self._history.record(key, kind, detail)

    def _publish(self) -> None:
        if self._generation >= MAX_GENERATION:
            raise OverflowError("pool state generation exhausted")
        self._generation += 1
        self.state.set(self._snapshot())

    def _snapshot(self) -> PoolState:
        return PoolState(self._generation, types.MappingProxyType(self._statuses.copy()))
