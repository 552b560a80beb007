"""How many workers a group needs: the group scaler's decision, pure and clock-driven.

The proposal: "worker groups are responsible for scaling the number of workers depending on
queue length and processing rate". This module holds the whole decision, without I/O, so every
case is tested with a fake clock (`tests/control_loops/test_scaling.py`); the loop that feeds
it and carries its result out through the driver is `group_scaler`.

From what it observes of a group (ready messages, requests in flight, the workers' reports of
the requests they finished and the time they were busy) it estimates one worker's service
rate, the group's arrival rate and its busy share, and recommends

    max( arrival / (rate x target_busy) + backlog / (rate x drain_seconds),   (rates)
         workers x busy / target_busy )                                       (busy share)

clamped to [min_workers, max_workers]. Before any rate is known a backlog doubles the group.
Out fast: a recommendation above the current size is acted on at once. In slowly: the size
applied is the highest recommendation of the last `scale_in_window` seconds (the HPA's
`behavior.scaleDown.stabilizationWindowSeconds`), so a lull shorter than the window shrinks
nothing; and a group is never taken below the work it holds now (requests in flight over
concurrency: a floor of the moment, not kept in the window).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
from collections.abc import Mapping


class Reason(enum.StrEnum):
    """Why a group has the size it was given (`osrdyne_scaling_decisions_total{reason}`)."""

    BACKLOG = "backlog"  # ready messages to drain
    ARRIVAL = "arrival"  # the arrival rate needs this many workers
    BUSY = "busy"  # the workers are busier than the target share
    IN_FLIGHT = "in_flight"  # the work the workers hold
    MINIMUM = "minimum"  # nothing needs more than the minimum
    MAXIMUM = "maximum"  # the need passes the maximum
    IDLE = "idle"  # the load fell, held for the window, and the group shrinks


@dataclasses.dataclass(frozen=True)
class Policy:
    """The bounds and targets of one group's size (from `groups.scaling`)."""

    min_workers: int = 1
    max_workers: int = 1
    #: Seconds a lower recommendation must hold before the group shrinks to it.
    scale_in_window: float = 60.0
    #: Share of its capacity a worker should be busy at the arrival rate (headroom).
    target_busy: float = 0.8
    #: Seconds the group should take to drain its backlog, on top of the arrivals.
    drain_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError("need 1 <= min_workers <= max_workers")
        if not 0 < self.target_busy <= 1:
            raise ValueError("target_busy must be in (0, 1]")


@dataclasses.dataclass(frozen=True)
class Load:
    """What the controller knows of one group's load at one moment."""

    #: Workers the group runs now.
    workers: int
    #: Ready messages in its queue (not yet delivered).
    backlog: int
    #: Requests the workers hold (delivered, not yet answered).
    in_flight: int = 0
    #: Requests one worker handles at once.
    concurrency: int = 1
    #: Requests per second one fully busy worker answers (None: not measured yet).
    service_rate: float | None = None
    #: Requests per second arriving at the group (None: not measured yet).
    arrival_rate: float | None = None
    #: Share of the workers' capacity busy lately, 0..1 (None: not measured yet).
    busy: float | None = None


def recommend(policy: Policy, load: Load) -> tuple[int, Reason]:
    """The workers `load` needs now, and why (no stabilisation: `Scaler` adds it)."""
    needs: list[tuple[int, Reason]] = [(policy.min_workers, Reason.MINIMUM)]
    rate = load.service_rate
    if rate is not None and rate > 0:
        arrival = (load.arrival_rate or 0.0) / (rate * policy.target_busy)
        backlog = load.backlog / (rate * policy.drain_seconds)
        reason = Reason.BACKLOG if backlog > arrival else Reason.ARRIVAL
        needs.append((math.ceil(arrival + backlog - 1e-9), reason))
    elif load.backlog > 0:
        needs.append((max(1, load.workers) * 2, Reason.BACKLOG))
    if load.busy is not None and load.workers > 0:
        needs.append((math.ceil(load.workers * load.busy / policy.target_busy - 1e-9), Reason.BUSY))
    # The first need among the highest: in the order above, so ties name the simplest cause.
    n, reason = max(needs, key=lambda need: need[0])
    if n > policy.max_workers:
        return policy.max_workers, Reason.MAXIMUM
    return n, reason


@dataclasses.dataclass(frozen=True)
class Decision:
    """The size a group should have now."""

    desired: int
    reason: Reason
    #: The recommendation of this moment, before the scale-in window.
    recommended: int


class Scaler:
    """One group's decisions over time: out at once, in after `scale_in_window`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        #: (time, recommendation, reason) of the window, oldest first.
        self._window: collections.deque[tuple[float, int, Reason]] = collections.deque()
        #: The last decision (None before the first).
        self.last: Decision | None = None

    def decide(self, load: Load, now: float) -> Decision:
        n, reason = recommend(self.policy, load)
        window = self._window
        while window and window[0][0] < now - self.policy.scale_in_window:
            window.popleft()
        window.append((now, n, reason))
        held, held_reason = max(((r, why) for _, r, why in window), key=lambda x: x[0])
        # Never below the work in flight, whatever the window held; a floor, never a reason
        # to grow (the reports it comes from are seconds old, some of workers drained away).
        held_work = math.ceil(load.in_flight / max(1, load.concurrency))
        floor = min(self.policy.max_workers, load.workers, held_work)
        desired = max(held, floor)
        if desired > held:
            why = Reason.IN_FLIGHT
        elif desired > load.workers:
            why = reason if desired == n else held_reason
        elif desired < load.workers:
            why = Reason.IDLE
        else:
            why = held_reason
        self.last = Decision(desired=desired, reason=why, recommended=n)
        return self.last


@dataclasses.dataclass
class _Worker:
    """The last report of one worker: its cumulative counters and when they came."""

    at: float
    handled: float
    busy_seconds: float
    in_flight: int
    concurrency: int
    #: Seconds since its report before (None: its first): its report interval.
    interval: float | None = None


class RateEstimator:
    """One group's rates from its workers' cumulative counters and its backlog samples.

    A worker's report carries how many requests it finished and how many slot-seconds it
    was busy since it started (docs/protocol.md): their ratio between two reports is its
    service rate, the busy seconds over the elapsed time (`busy_span` at least) its busy
    share. The arrival rate is what the group finished plus what its backlog grew, over the
    last `horizon` seconds.
    """

    def __init__(
        self,
        *,
        horizon: float = 5.0,
        stale_after: float = 15.0,
        held_for: float = 6.0,
        busy_span: float = 1.0,
    ) -> None:
        self._horizon = horizon
        #: The shortest time a busy share is measured over: a report can follow the one
        #: before by a few ms (a quiet worker reports a request as it arrives, then on its
        #: interval's tick), and one 50 ms request over 60 ms is no busy worker.
        self._busy_span = busy_span
        #: (time, busy seconds) of each worker's reports, back to the newest one at least
        #: `busy_span` old: where its busy share is measured from. Reports closer than a
        #: sixteenth of the span replace one another: a worker that reports a thousand times
        #: a second keeps about 18 marks, not a thousand.
        self._marks: dict[str, collections.deque[tuple[float, float]]] = {}
        #: A worker silent this long is idle (workers report while busy).
        self._stale_after = stale_after
        #: ... and holds nothing after this long (each report says what it holds then).
        self._held_for = held_for
        self._now = 0.0
        self._workers: dict[str, _Worker] = {}
        self._busy: dict[str, float] = {}
        self.service_rate: float | None = None
        #: Smoothed finished requests and busy slot-seconds per report: their ratio is the
        #: service rate (a ratio of sums: a report of a few requests refused at once while a
        #: worker drains moves it little).
        self._finished = 0.0
        self._busy_spent = 0.0
        #: (time, backlog, requests finished by the group so far).
        self._samples: collections.deque[tuple[float, int, float]] = collections.deque()
        self._handled_total = 0.0

    def report(self, worker: str, counters: Mapping[str, float], now: float) -> None:
        """Fold one worker report (`handled`, `busy_seconds`, `in_flight`, `concurrency`)."""
        current = _Worker(
            at=now,
            handled=counters.get("handled", 0.0),
            busy_seconds=counters.get("busy_seconds", 0.0),
            in_flight=int(counters.get("in_flight", 0)),
            concurrency=max(1, int(counters.get("concurrency", 1))),
        )
        self._now = max(self._now, now)
        previous = self._workers.get(worker)
        self._workers[worker] = current
        if previous is not None and now > previous.at:
            current.interval = now - previous.at
        marks = self._marks.setdefault(worker, collections.deque())
        if previous is None or current.handled < previous.handled:
            # First report, or a restarted worker whose counters began again.
            marks.clear()
            marks.append((now, current.busy_seconds))
            return
        handled = current.handled - previous.handled
        busy = current.busy_seconds - previous.busy_seconds
        self._handled_total += handled
        if handled > 0 and busy > 0:
            first = self.service_rate is None
            self._finished = handled if first else 0.8 * self._finished + 0.2 * handled
            self._busy_spent = busy if first else 0.8 * self._busy_spent + 0.2 * busy
            self.service_rate = current.concurrency * self._finished / self._busy_spent
        if len(marks) > 1 and now - marks[-1][0] < self._busy_span / 16:
            marks[-1] = (now, current.busy_seconds)  # a close report replaces the one before
        else:
            marks.append((now, current.busy_seconds))
        while len(marks) > 2 and marks[1][0] <= now - self._busy_span:
            marks.popleft()
        since, busy_then = marks[0]
        if now - since >= self._busy_span:
            spent = current.busy_seconds - busy_then
            share = spent / ((now - since) * current.concurrency)
            self._busy[worker] = min(1.0, max(0.0, share))

    def sample(self, backlog: int, now: float) -> None:
        """Note the backlog read at `now`; forget the workers silent for four times
        `stale_after` (long gone, or idle: a worker that reports again starts afresh), so a
        group's record does not grow with its workers' churn."""
        self._now = max(self._now, now)
        self._samples.append((now, backlog, self._handled_total))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self._horizon:
            self._samples.popleft()
        gone = now - 4 * self._stale_after
        for worker in [k for k, w in self._workers.items() if w.at < gone]:
            del self._workers[worker]
            self._busy.pop(worker, None)
            self._marks.pop(worker, None)

    def _fresh(self, worker: str) -> bool:
        """Its busy share still holds: heard from within two of its report intervals (a
        worker reports on its interval while busy, then once more as it goes idle, then
        falls silent: silent for two intervals, it is idle), and within `stale_after`."""
        reported = self._workers[worker]
        span = self._stale_after
        if reported.interval is not None:
            span = min(span, max(2 * reported.interval, 1.0))
        return reported.at > self._now - span

    @property
    def in_flight(self) -> int:
        """What the workers heard lately hold (each report says what it holds then; a
        worker silent for two of its intervals, or `held_for`, holds nothing)."""
        recent = self._now - self._held_for
        return sum(
            w.in_flight for k, w in self._workers.items() if w.at > recent and self._fresh(k)
        )

    @property
    def concurrency(self) -> int:
        return max((w.concurrency for w in self._workers.values()), default=1)

    @property
    def busy(self) -> float | None:
        """The mean busy share of the workers heard lately (idle ones stop reporting: `load`
        divides by the group's size instead)."""
        shares = [share for k, share in self._busy.items() if self._fresh(k)]
        return sum(shares) / len(shares) if shares else (0.0 if self._busy else None)

    def _group_busy(self, workers: int) -> float | None:
        """The group's busy share: the fresh workers' shares over its `workers` (a silent
        worker is idle), or over the workers heard when more were (some drained away)."""
        if not self._busy:
            return None
        shares = [share for k, share in self._busy.items() if self._fresh(k)]
        return min(1.0, sum(shares) / max(1, workers, len(shares)))

    @property
    def arrival_rate(self) -> float | None:
        """What the group finished plus what its backlog grew, per second, over the horizon
        (the finished count lags by a report interval: `load` adds a faster estimate)."""
        if len(self._samples) < 2:
            return None
        (t0, b0, h0), (t1, b1, h1) = self._samples[0], self._samples[-1]
        if t1 <= t0:
            return None
        return max(0.0, ((h1 - h0) + (b1 - b0)) / (t1 - t0))

    def _recent_growth(self) -> float | None:
        """The backlog's growth per second between the last two readings."""
        if len(self._samples) < 2:
            return None
        (t0, b0, _), (t1, b1, _) = self._samples[-2], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else None

    def load(self, *, workers: int, backlog: int) -> Load:
        """The group's load now. The arrival rate is the last reading's (the backlog's growth
        plus what `workers` serve: all busy while more wait than they hold), so a step is
        seen on the first reading after it and its end as soon; the horizon's (which lags by
        the workers' report interval) only until two readings exist."""
        arrival = self.arrival_rate
        growth = self._recent_growth()
        group_busy = self._group_busy(workers)
        if growth is not None and self.service_rate is not None:
            # Every worker has work while more wait than they can hold; else as reported (a
            # request or two caught in the queue at a low rate is no sign of a full group,
            # nor is one request waiting for one idle worker).
            full = backlog > workers * self.concurrency
            busy = 1.0 if full else (group_busy or 0.0)
            fast = max(0.0, growth + workers * self.service_rate * busy)
            arrival = fast
        return Load(
            workers=workers,
            backlog=backlog,
            in_flight=self.in_flight,
            concurrency=self.concurrency,
            service_rate=self.service_rate,
            arrival_rate=arrival,
            busy=group_busy,
        )
