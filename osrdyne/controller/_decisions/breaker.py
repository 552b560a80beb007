"""Which worker groups are failing: a circuit breaker per key, pure (no I/O, a given clock).

A group is *failing* once its workers failed to start `threshold` times within `window`
seconds. A failed start is either a worker's own `start-failed` report (with its reason), or
the exit of a worker that never served (from a driver that describes its workers: a raw
worker that only exits counts too, its exit status as the reason). A worker that reported and
then exits counts once; a worker that served (`ready`, `request-received`) and then exits is
a crash, not a failed start: a request that kills every worker taking it (a poison request)
ends at the delivery limit, as without the breaker.

What a worker says and what the driver sees travel apart: a worker's `ready` goes through the
broker (the SDK sends it, confirmed, before it handles any request), its exit is polled from
the driver. So an exit is judged only `settle` seconds after it was seen, against the reports
heard by then; and a driver reuses a worker id for each restart of its slot, so what was heard
is counted per life (each `ready` and each `start-failed` matches one exit), not remembered as
a flag that the next life's report would merge with.

The breaker opens when the group becomes failing (its callers are answered at once, see
`failing`), and stays open while the driver keeps restarting the workers with its own
back-off: each restart is the half-open probe. The first worker that serves closes it.
"""

from __future__ import annotations

import collections
import dataclasses
import signal
from collections.abc import Container, Mapping, Sequence
from typing import Any

from drivers.base import WorkerInfo


@dataclasses.dataclass
class Failing:
    """A failing group, as the status document shows it."""

    #: The last reason a worker gave (or its exit status), cleaned and bounded.
    reason: str
    #: Epoch seconds the group became failing.
    since: float
    #: Failed starts counted since it became failing (those that made it failing included).
    failed_starts: int


@dataclasses.dataclass
class _Record:
    #: Clock times of the recent failed starts (within the window).
    recent: collections.deque[float] = dataclasses.field(default_factory=collections.deque)
    reason: str | None = None
    #: The reason came from a worker's report (an exit status does not replace it).
    reported: bool = False
    failing: Failing | None = None


@dataclasses.dataclass(frozen=True)
class Change:
    """What one event did to a key's breaker (the caller logs and counts it)."""

    key: str
    #: The group became failing (True) or serves again (False); None: no change.
    failing: bool | None
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class _Exit:
    """An exit seen in the driver's view, judged once `settle` seconds have passed."""

    seen: float
    worker_id: str
    reason: str


class Breakers:
    """The breakers of a pool's groups; `failing` names the open ones."""

    def __init__(self, *, threshold: int, window: float, settle: float = 0.0) -> None:
        self.threshold = threshold
        self.window = window
        self.settle = settle
        self._records: dict[str, _Record] = {}
        #: Lives of each worker (per key, by worker id) heard serving (`ready`, or a request
        #: received when none was heard) and not yet matched to an exit.
        self._served: dict[str, collections.Counter[str]] = {}
        #: Lives of each worker heard reporting `start-failed`, not yet matched to an exit.
        self._reported: dict[str, collections.Counter[str]] = {}
        #: Restarts of each worker as last observed (per key, by worker id).
        self._restarts: dict[str, dict[str, int]] = {}
        #: Exits seen and not judged yet, oldest first (per key).
        self._exits: dict[str, collections.deque[_Exit]] = {}
        #: The keys the driver described at the last view (None: no view yet).
        self._described: set[str] | None = None
        #: The failing groups, by key.
        self.failing: dict[str, Failing] = {}

    def failed_start(
        self,
        key: str,
        reason: str,
        *,
        now: float,
        wall: float,
        worker_id: str | None = None,
        reported: bool = True,
    ) -> Change:
        """A worker of `key` failed to start, for `reason`."""
        if reported and worker_id is not None:
            self._reported.setdefault(key, collections.Counter())[worker_id] += 1
        record = self._records.setdefault(key, _Record())
        if reported or not record.reported or record.reason is None:
            record.reason, record.reported = reason, reported or record.reported
        record.recent.append(now)
        while record.recent and record.recent[0] < now - self.window:
            record.recent.popleft()
        if record.failing is not None:
            record.failing.failed_starts += 1
            record.failing.reason = record.reason
            return Change(key, None, record.reason)
        if len(record.recent) < self.threshold:
            return Change(key, None, record.reason)
        record.failing = Failing(reason=record.reason, since=wall, failed_starts=len(record.recent))
        self.failing[key] = record.failing
        return Change(key, True, record.reason)

    def served(self, key: str, worker_id: str | None, *, ready: bool = True) -> Change:
        """A worker of `key` serves (`ready`, or a request received: `ready` False): the
        breaker closes. A `ready` starts a life that served; a request received counts as one
        only when none is pending (a worker that does not report `ready`; its requests are
        many per life)."""
        if worker_id is not None:
            served = self._served.setdefault(key, collections.Counter())
            if ready or served[worker_id] == 0:
                served[worker_id] += 1
        record = self._records.pop(key, None)
        if record is None or record.failing is None:
            return Change(key, None)
        del self.failing[key]
        return Change(key, False)

    def observe(
        self,
        described: Mapping[str, Sequence[WorkerInfo]],
        *,
        expected: Container[str],
        now: float,
        wall: float,
    ) -> list[Change]:
        """The driver's view of the workers (every group it describes; only the `expected`
        ones are watched). Each new exit is noted, and judged `settle` seconds later: an exit
        of a life that neither served nor reported is a failed start. Exits from before the
        watch are not counted: those of every group at the first view (adopted), and those of
        a group the driver already described while it was not expected (a group of the same
        key still being stopped); a group new to the driver counts from its first exit."""
        first, before = self._described is None, self._described or set()
        self._described = set(described)
        for key, workers in described.items():
            if key not in expected:
                continue
            new = key not in self._restarts
            seen = self._restarts.setdefault(key, {})
            for info in workers:
                carried = info.restarts if new and (first or key in before) else 0
                last = seen.get(info.worker_id, carried)
                seen[info.worker_id] = info.restarts
                exits = self._exits.setdefault(key, collections.deque())
                for _ in range(info.restarts - last):
                    exits.append(_Exit(now, info.worker_id, exit_reason(info.last_exit)))
        return self._judge(now=now, wall=wall)

    def _judge(self, *, now: float, wall: float) -> list[Change]:
        """Judge the exits seen `settle` seconds ago or more: each is matched to a life heard
        reporting `start-failed` (counted already), else to one heard serving (a crash), else
        it is a failed start."""
        changes = []
        for key, exits in self._exits.items():
            while exits and exits[0].seen + self.settle <= now:
                seen = exits.popleft()
                for heard in (self._reported.get(key), self._served.get(key)):
                    if heard is not None and heard[seen.worker_id] > 0:
                        heard[seen.worker_id] -= 1
                        break
                else:
                    changes.append(
                        self.failed_start(key, seen.reason, now=now, wall=wall, reported=False)
                    )
        return changes

    def keep(self, wanted: Container[str]) -> list[str]:
        """Forget every key not in `wanted` (the groups still expected); the failing ones
        among the forgotten are returned. Costs the keys remembered, not those wanted."""
        gone = []
        tables: tuple[dict[str, Any], ...] = (
            self._records,
            self._served,
            self._reported,
            self._restarts,
            self._exits,
        )
        for table in tables:
            for key in [k for k in table if k not in wanted]:
                del table[key]
        for key in [k for k in self.failing if k not in wanted]:
            del self.failing[key]
            gone.append(key)
        return gone


def exit_reason(code: int | None) -> str:
    """A worker's exit status in words (negative: killed by that signal)."""
    if code is None:
        return "a worker exited before serving"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"a worker was killed by {name} ({code}) before serving"
    return f"a worker exited with status {code} before serving"
