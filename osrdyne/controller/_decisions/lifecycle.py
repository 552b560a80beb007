"""Each worker group's place in its life cycle, and the deadlines that move it: a pure rule
with its clock passed in, tested without sleeping (the tracker, `tracker`, publishes what it
decides and wakes when a deadline falls).

    (none) --require--> ACTIVE --unbind_delay without activity--> UNBOUND
    UNBOUND --stop_delay--> (none)          UNBOUND --require--> ACTIVE
    ACTIVE or UNBOUND --stop(key, drain)--> UNBOUND, (none) after `drain`
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterable, Sequence

from osrdyne.controller._decisions.history import EventKind
from osrdyne.controller._decisions.pool_state import GroupStatus


@dataclasses.dataclass
class _Deadlines:
    status: GroupStatus
    active_until: float
    stop_at: float = float("inf")
    #: When it was unbound (how long it has been, in the log line of its stop).
    unbound_at: float = float("inf")


@dataclasses.dataclass(frozen=True)
class Transition:
    """A group that moved on when its deadline passed: `UNBOUND` (idle for `unbind_delay`)
    or `STOPPED` (unbound for `seconds`)."""

    key: str
    kind: EventKind
    seconds: float


class Stop(enum.Enum):
    #: The key has no group.
    NO_GROUP = "no group"
    #: The group was Active: it is Unbound now (a new expected state).
    UNBOUND = "unbound"
    #: The group was Unbound already: it stops sooner than it would have.
    SOONER = "sooner"
    #: The group was Unbound already and stops no later than asked: nothing changes.
    UNCHANGED = "unchanged"


class Lifecycle:
    def __init__(
        self,
        *,
        unbind_delay: float,
        stop_delay: float,
        initial: Iterable[str],
        clock: Callable[[], float],
    ) -> None:
        self.unbind_delay = unbind_delay
        self.stop_delay = stop_delay
        self._clock = clock
        now = clock()
        self._groups = {key: _Deadlines(GroupStatus.ACTIVE, now + unbind_delay) for key in initial}
        #: Each group's status, kept with `_groups`: a snapshot is a copy of it (a C-speed
        #: dict copy: a burst of thousands of new keys publishes thousands of snapshots).
        self.statuses = {key: g.status for key, g in self._groups.items()}
        #: No deadline falls before this (it may be earlier than the first one: then `advance`
        #: scans for nothing). `advance` scans every group only once it has passed, so a burst
        #: of `require`s, each waking the tracker, does not scan thousands of groups each time.
        self._next = now + unbind_delay if self._groups else math.inf
        #: Groups that left the expected state so far (caches of what depends on the
        #: expected keys know nothing was removed while this stays the same).
        self.removals = 0

    def require(self, key: str, *, extra_lifetime: float = 0.0) -> EventKind | None:
        """Make the group of `key` Active for at least `unbind_delay + extra_lifetime` from
        now: `REQUIRED` for a new group, `ACTIVE_AGAIN` for an Unbound one (a new expected
        state both), None when it was Active already (its deadline pushed back)."""
        until = self._clock() + self.unbind_delay + extra_lifetime
        group = self._groups.get(key)
        if group is not None and group.status is GroupStatus.ACTIVE:
            group.active_until = max(group.active_until, until)
            return None
        kind = EventKind.REQUIRED if group is None else EventKind.ACTIVE_AGAIN
        self._groups[key] = _Deadlines(GroupStatus.ACTIVE, until)
        self.statuses[key] = GroupStatus.ACTIVE
        self._next = min(self._next, until)
        return kind

    def stop(self, key: str, *, drain: float) -> tuple[Stop, float]:
        """Unbind the group of `key` now and stop it after `drain` seconds (between 0 and
        `stop_delay`: the drain returned with what happened)."""
        group = self._groups.get(key)
        if group is None:
            return Stop.NO_GROUP, drain
        drain = min(max(0.0, drain), self.stop_delay)
        stop_at = self._clock() + drain
        self._next = min(self._next, stop_at)
        if group.status is GroupStatus.UNBOUND:
            if stop_at < group.stop_at:
                group.stop_at = stop_at
                return Stop.SOONER, drain
            return Stop.UNCHANGED, drain
        group.status, group.stop_at, group.unbound_at = (
            GroupStatus.UNBOUND,
            stop_at,
            stop_at - drain,
        )
        self.statuses[key] = GroupStatus.UNBOUND
        return Stop.UNBOUND, drain

    def advance(self) -> tuple[Sequence[Transition], float | None]:
        """Apply the deadlines that passed: what moved on, in order, and when the next
        deadline falls (None: none)."""
        now = self._clock()
        if now < self._next:
            return (), None if math.isinf(self._next) else self._next
        moved: list[Transition] = []
        for key, group in list(self._groups.items()):
            if group.status is GroupStatus.ACTIVE and group.active_until <= now:
                group.status, group.stop_at = GroupStatus.UNBOUND, now + self.stop_delay
                self.statuses[key] = GroupStatus.UNBOUND
                group.unbound_at = now
                moved.append(Transition(key, EventKind.UNBOUND, self.unbind_delay))
            if group.status is GroupStatus.UNBOUND and group.stop_at <= now:
                del self._groups[key]
                del self.statuses[key]
                self.removals += 1
                moved.append(Transition(key, EventKind.STOPPED, now - group.unbound_at))
        upcoming = [
            g.active_until if g.status is GroupStatus.ACTIVE else g.stop_at
            for g in self._groups.values()
        ]
        self._next = min(upcoming) if upcoming else math.inf
        return moved, (min(upcoming) if upcoming else None)
