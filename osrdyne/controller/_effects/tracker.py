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
(`history`) when one is given. The life cycle itself is the pure rule of `lifecycle` (time
is a parameter: tested without sleeping); the tracker publishes each generation and wakes
when a deadline falls.
"""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import Callable, Iterable

from osrdyne.controller._decisions.history import EventKind, KeyHistory
from osrdyne.controller._decisions.lifecycle import Lifecycle, Stop
from osrdyne.controller._decisions.pool_state import MAX_GENERATION, PoolState
from osrdyne.controller._effects.watch import Watch

logger = logging.getLogger(__name__)


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
        self._clock = clock
        self._history = history
        #: Each group's place in its life cycle and its deadlines (the pure rule).
        self._lifecycle = Lifecycle(
            unbind_delay=unbind_delay, stop_delay=stop_delay, initial=initial, clock=clock
        )
        for key in self._lifecycle.statuses:
            self._note(key, EventKind.ADOPTED, "request queue found at the start of the session")
        self._generation = 1
        self.state: Watch[PoolState] = Watch(self._snapshot())
        self._wake = asyncio.Event()

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def unbind_delay(self) -> float:
        return self._lifecycle.unbind_delay

    @property
    def stop_delay(self) -> float:
        return self._lifecycle.stop_delay

    @property
    def removals(self) -> int:
        """Groups that left the expected state so far (caches of what depends on the
        expected keys know nothing was removed while this stays the same)."""
        return self._lifecycle.removals

    def require(self, key: str, *, extra_lifetime: float = 0.0, cause: str = "a request") -> int:
        """Make the group of `key` Active for at least `unbind_delay + extra_lifetime` from now.

        Returns the generation from which the group is Active: once the request-queue loop
        has reached it, the key's queue exists and is bound. `cause` says why, in the key's
        history.
        """
        kind = self._lifecycle.require(key, extra_lifetime=extra_lifetime)
        if kind is None:
            return self._generation
        if kind is EventKind.REQUIRED:
            logger.info("worker group %r required", key)
            self._note(key, kind, f"new group, for {cause}")
        else:
            logger.info("worker group %r active again", key)
            self._note(key, kind, f"bound again, for {cause}")
        self._publish()
        self._wake.set()
        return self._generation

    def stop(self, key: str, *, drain: float) -> int | None:
        """Unbind the group of `key` now and stop it after `drain` seconds (at most
        `stop_delay`): the two stages of an idle group's stop, without waiting for it to be
        idle. A request or activity before then makes it Active again, as for any Unbound
        group. Returns the generation from which it is Unbound; None when it has no group."""
        stop, drain = self._lifecycle.stop(key, drain=drain)
        if stop is Stop.NO_GROUP:
            return None
        if stop is Stop.SOONER:
            self._wake.set()
        elif stop is Stop.UNBOUND:
            logger.info("worker group %r stopped by an operator: unbind", key)
            self._note(key, EventKind.UNBOUND, f"stopped by an operator: stops in {drain:.0f}s")
            self._publish()
            self._wake.set()
        return self._generation

    def advance(self) -> float | None:
        """Apply the deadlines that passed; return when the next one falls (None: none)."""
        moved, upcoming = self._lifecycle.advance()
        for step in moved:
            if step.kind is EventKind.UNBOUND:
                logger.info("worker group %r idle for %.0fs: unbind", step.key, step.seconds)
                self._note(step.key, step.kind, f"idle for {step.seconds:.0f}s")
            else:
                logger.info("worker group %r unbound for %.0fs: stop", step.key, step.seconds)
                self._note(step.key, step.kind, "unbound long enough: workers stopped")
        if moved:
            self._publish()
        return upcoming

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
        return PoolState(self._generation, types.MappingProxyType(self._lifecycle.statuses.copy()))
