"""The limits on new groups: the group cap, the driver's capacity and the broker's limits.

Each is a `new_key` check of the gate (`gate`), so a request for a new key beyond any of
them is answered at once with `x-status: overloaded` and a JSON `reason` (docs/protocol.md),
never left to time out; keys that have a group are admitted before any check runs.

What counts against the caps is every group the pool has: the tracker's expected groups
(those being started included: a group counts from the moment it is required, so a burst
cannot overshoot), and the groups that left the expected state but whose workers still run or
whose queue is not deleted yet (being stopped: a queue found to still hold requests brings
its group back). When one of those has stopped, its place is free again.

The broker's limits are read periodically (`broker_limits`); between two readings every
group admitted since counts as a new queue at `broker.fds_per_queue` file descriptors and
`broker.processes_per_queue` Erlang processes, so a burst is stopped by the estimate before
the next reading shows it. File descriptors are also counted for every queue the broker
holds (the more of the two): quorum queues open their files lazily, so the broker's current
use understates what it needs after a restart. `broker_refusal` is pure, tested without a
broker.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol

from osrdyne import wire
from osrdyne.controller._broker_settings import BrokerLimitSettings
from osrdyne.controller._decisions.broker_figures import BrokerFigures
from osrdyne.controller._decisions.gate import NewKeyCheck, Refusal
from osrdyne.controller._decisions.status import AdmissionReport, BrokerReport


def _overloaded(reason: str, error: str, **details: object) -> Refusal:
    return Refusal(wire.Status.OVERLOADED, error, reason=reason, details=details)


def _resources(
    figures: BrokerFigures, limits: BrokerLimitSettings
) -> list[tuple[str, str, int, int, int, float]]:
    """(reason, what, used, total, headroom, per queue) of each resource the broker reports.

    File descriptors count as the more of what the broker uses now and what its queues would
    take all open: a quorum queue opens its log segments when it writes or recovers them, so
    a broker whose queues hold few fds now may run out when it restarts with them all."""
    fd_used = figures.fd_used
    if fd_used is not None and figures.queues is not None:
        fd_used = max(fd_used, math.ceil(figures.queues * limits.fds_per_queue))
    every = (
        ("broker_fd", "file descriptors", fd_used, figures.fd_total, limits.fd_headroom,
         limits.fds_per_queue),
        ("broker_processes", "Erlang processes", figures.proc_used, figures.proc_total,
         limits.process_headroom, limits.processes_per_queue),
    )  # fmt: skip
    return [
        (reason, what, used, total, headroom, per_queue)
        for reason, what, used, total, headroom, per_queue in every
        if used is not None and total is not None
    ]


def broker_room(figures: BrokerFigures, limits: BrokerLimitSettings, new_queues: int) -> int | None:
    """New queues the broker can still take before a headroom, after `new_queues` were asked
    of it since `figures` were read (None: it does not report its limits)."""
    rooms: list[float] = []
    for _, _, used, total, headroom, per_queue in _resources(figures, limits):
        free = total - headroom - used - new_queues * per_queue
        rooms.append(free / per_queue if per_queue > 0 else (math.inf if free >= 0 else -1))
    if not rooms:
        return None
    room = min(rooms)
    return max(0, math.floor(room)) if math.isfinite(room) else None


def broker_refusal(
    figures: BrokerFigures | None, limits: BrokerLimitSettings, new_queues: int
) -> Refusal | None:
    """Why the broker cannot take one more request queue now, or None."""
    if figures is None:
        return None  # never read: the request queue's declare is bounded anyway
    if limits.refuse_on_alarm and figures.mem_alarm:
        return _overloaded(
            "broker_memory_alarm",
            "the broker has a memory alarm (it blocks publishers): no new worker group now",
            mem_used=figures.mem_used,
            mem_limit=figures.mem_limit,
        )
    if limits.refuse_on_alarm and figures.disk_alarm:
        return _overloaded(
            "broker_disk_alarm",
            "the broker has a disk alarm (it blocks publishers): no new worker group now",
            disk_free=figures.disk_free,
            disk_free_limit=figures.disk_free_limit,
        )
    for reason, what, used, total, headroom, per_queue in _resources(figures, limits):
        expected = used + (new_queues + 1) * per_queue
        if expected > total - headroom:
            return _overloaded(
                reason,
                f"the broker is short of {what} ({used} of {total} used, {new_queues} new "
                f"queue(s) since; {headroom} kept free): no new worker group now",
                used=used,
                total=total,
                headroom=headroom,
                new_queues=new_queues,
            )
    return None


class BrokerReading(Protocol):
    """The last reading of the broker's limits (`broker_limits.BrokerLimits`)."""

    @property
    def figures(self) -> BrokerFigures | None: ...

    @property
    def error(self) -> str | None: ...

    def new_since_read(self) -> int: ...


class GroupCount:
    """The groups counted against the caps: the expected ones, and those that left the
    expected state but whose workers still run or whose queue still exists (being stopped).

    Called for every new key: during a burst of thousands, a count that walked every group
    each time would cost O(n) per key. The keys being stopped are computed once per change of
    what the loops last saw (a new `running` set or `actual` mapping: once per pass) or of a
    removal from the expected state; between those, the expected state only gains keys, so the
    cached few can only leave the count."""

    def __init__(
        self,
        *,
        expected: Callable[[], Mapping[str, object]],
        running: Callable[[], AbstractSet[str]],
        actual: Callable[[], Mapping[str, object]],
        removals: Callable[[], int],
    ) -> None:
        self._expected = expected
        self._running = running
        self._actual = actual
        self._removals = removals
        self._seen: tuple[object, object, int] | None = None
        self._stopping: frozenset[str] = frozenset()

    def __call__(self) -> int:
        expected, running, actual = self._expected(), self._running(), self._actual()
        removals, last = self._removals(), self._seen
        if last is None or last[0] is not running or last[1] is not actual or last[2] != removals:
            self._stopping = frozenset((running | actual.keys()) - expected.keys())
            self._seen = (running, actual, removals)
        return len(expected) + sum(1 for key in self._stopping if key not in expected)


class Admission:
    """The `new_key` checks of a session's gate, and what they show in `/status`."""

    def __init__(
        self,
        *,
        max_groups: int | None,
        capacity: Callable[[], int | None],
        groups: Callable[[], int],
        broker: BrokerReading | None,
        limits: BrokerLimitSettings,
        on_refusal: Callable[[str], None] | None = None,
    ) -> None:
        self._max_groups = max_groups
        self._capacity = capacity
        self._groups = groups
        self._broker = broker
        self._limits = limits
        self._on_refusal = on_refusal
        #: New keys refused so far, by reason.
        self.refused: collections.Counter[str] = collections.Counter()

    @property
    def checks(self) -> tuple[NewKeyCheck, ...]:
        return (self._counted(self.group_cap), self._counted(self.driver_capacity),
                self._counted(self.broker_limits))  # fmt: skip

    def _counted(self, check: NewKeyCheck) -> NewKeyCheck:
        def counted(key: str) -> Refusal | None:
            refusal = check(key)
            if refusal is not None:
                self.refused[refusal.reason] += 1
                if self._on_refusal is not None:
                    self._on_refusal(refusal.reason)
            return refusal

        return counted

    def group_cap(self, key: str) -> Refusal | None:
        groups = self._groups()
        if self._max_groups is not None and groups >= self._max_groups:
            return _overloaded(
                "max_groups",
                f"the pool runs its most worker groups ({groups} of groups.max_groups "
                f"{self._max_groups}): no group for a new key until one stops",
                limit=self._max_groups,
                groups=groups,
            )
        return None

    def driver_capacity(self, key: str) -> Refusal | None:
        capacity = self._capacity()
        groups = self._groups()
        if capacity is not None and groups >= capacity:
            return _overloaded(
                "driver_capacity",
                f"the driver runs as many worker groups as it can ({groups} of {capacity}): "
                "no group for a new key until one stops",
                limit=capacity,
                groups=groups,
            )
        return None

    def broker_limits(self, key: str) -> Refusal | None:
        if self._broker is None:
            return None
        return broker_refusal(self._broker.figures, self._limits, self._broker.new_since_read())

    def report(self) -> AdmissionReport:
        broker = self._broker
        figures = broker.figures if broker is not None else None
        new = broker.new_since_read() if broker is not None else 0
        refusing = None
        for check in (self.group_cap, self.driver_capacity, self.broker_limits):
            refusal = check("")
            if refusal is not None:
                refusing = refusal.reason
                break
        return AdmissionReport(
            groups=self._groups(),
            max_groups=self._max_groups,
            driver_capacity=self._capacity(),
            broker_room=broker_room(figures, self._limits, new) if figures else None,
            admitted_since_read=new,
            refusing=refusing,
            refused=dict(self.refused),
        )

    def broker_report(self) -> BrokerReport | None:
        broker = self._broker
        if broker is None:
            return None
        f = broker.figures
        if f is None:
            return BrokerReport(error=broker.error)
        return BrokerReport(
            node=f.node,
            fd_used=f.fd_used,
            fd_total=f.fd_total,
            proc_used=f.proc_used,
            proc_total=f.proc_total,
            mem_used=f.mem_used,
            mem_limit=f.mem_limit,
            mem_alarm=f.mem_alarm,
            disk_free=f.disk_free,
            disk_free_limit=f.disk_free_limit,
            disk_alarm=f.disk_alarm,
            queues=f.queues,
            read_at=f.time,
            error=broker.error,
        )
