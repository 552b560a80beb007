"""What happened to each key lately: a small, bounded timeline and its recent dead letters.

The console's page of a key shows how its group got where it is (required by an orphan or
warmed by an operator, group started, first ready, unbound, stopped) and the requests that
died in its queue. The components that see those moments record them here as they happen;
nothing is read back from logs. Everything is bounded, since keys are client-chosen and a
pool may have thousands: at most `max_keys` keys (the one quiet for longest is forgotten
first), `max_events` events and `max_dead_letters` dead letters each, every text cut to
`MAX_TEXT` characters. It lives as long as the controller, across leader sessions.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import time
from collections.abc import Callable

#: Longest text kept in an event or a dead letter (keys are kept whole: at most 255 bytes).
MAX_TEXT = 300


class EventKind(enum.StrEnum):
    """What happened to a key's group."""

    #: A new group was required: the first orphan of its key, or an operator's warm.
    REQUIRED = "required"
    #: An operator asked for the group (`osrdyne warm`, the console).
    WARM = "warm"
    #: An Unbound group became Active again (a request or its workers' activity).
    ACTIVE_AGAIN = "active_again"
    #: Its queue was unbound: idle for `unbind_delay`, or stopped by an operator.
    UNBOUND = "unbound"
    #: An operator asked to stop the group (`osrdyne stop`, the console).
    STOP = "stop"
    #: No longer expected: its workers are stopped and its queue deleted.
    STOPPED = "stopped"
    #: A request queue found at the start of a leader session (adopted).
    ADOPTED = "adopted"
    #: The driver started (or stopped) the group, or failed to.
    GROUP_STARTED = "group_started"
    GROUP_STOPPED = "group_stopped"
    DRIVER_ERROR = "driver_error"
    #: A worker reported `started`, or `ready` (the first `ready` after a require ends a cold
    #: start: its detail says how long it took).
    WORKER_STARTED = "worker_started"
    WORKER_READY = "worker_ready"
    FIRST_READY = "first_ready"
    #: Its workers kept failing to start: its requests are answered `start_failed` (the
    #: detail says why); `serving_again` when a worker serves (or the group goes).
    FAILING = "failing"
    SERVING_AGAIN = "serving_again"


@dataclasses.dataclass(frozen=True)
class Event:
    #: Epoch seconds.
    time: float
    kind: EventKind
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """A request that died in the key's queue, as the dead-letter responder saw it."""

    time: float
    reason: str
    correlation_id: str | None
    #: Times it died (from `x-death`).
    deaths: int | None
    #: Whether the responder could answer it (it had a `reply_to`).
    answered: bool
    #: The request's id (`message_id`, UUIDv7 from osrdyne's client), when it had a valid one.
    request_id: str | None = None


@dataclasses.dataclass
class _Key:
    events: collections.deque[Event]
    dead_letters: collections.deque[DeadLetter]
    #: Epoch seconds of the last change of expected state (required, unbound, stopped...).
    since: float | None = None
    #: Monotonic time a cold start began (a new group required), until its first `ready`.
    cold_start_began: float | None = None
    #: Seconds of its last cold start.
    cold_start: float | None = None


class KeyHistory:
    def __init__(
        self,
        *,
        max_keys: int = 5_000,
        max_events: int = 24,
        max_dead_letters: int = 12,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_keys = max_keys
        self.max_events = max_events
        self.max_dead_letters = max_dead_letters
        self._clock = clock
        self._monotonic = monotonic
        self._keys: collections.OrderedDict[str, _Key] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    # -- recording ------------------------------------------------------------------------

    def record(self, key: str, kind: EventKind, detail: str = "") -> None:
        """Note that `kind` happened to the group of `key` now."""
        entry = self._entry(key)
        now = self._clock()
        entry.events.append(Event(now, kind, detail[:MAX_TEXT]))
        if kind in _STATE_CHANGES:
            entry.since = now
        if kind is EventKind.REQUIRED:
            entry.cold_start_began = self._monotonic()

    def worker_ready(self, key: str, worker: str | None) -> None:
        """A worker of `key` reported `ready`; the first since its group was required ends
        the group's cold start."""
        entry = self._entry(key)
        who = f"worker {worker}" if worker else "a worker"
        if entry.cold_start_began is None:
            self.record(key, EventKind.WORKER_READY, f"{who} ready")
            return
        entry.cold_start = max(0.0, self._monotonic() - entry.cold_start_began)
        entry.cold_start_began = None
        self.record(key, EventKind.FIRST_READY, f"{who} ready: cold start {entry.cold_start:.2f}s")

    def dead_letter(self, key: str, letter: DeadLetter) -> None:
        entry = self._entry(key)
        entry.dead_letters.append(
            dataclasses.replace(
                letter,
                reason=letter.reason[:MAX_TEXT],
                correlation_id=None
                if letter.correlation_id is None
                else letter.correlation_id[:MAX_TEXT],
            )
        )

    # -- reading --------------------------------------------------------------------------

    def events(self, key: str) -> list[Event]:
        entry = self._keys.get(key)
        return list(entry.events) if entry else []

    def dead_letters(self, key: str) -> list[DeadLetter]:
        entry = self._keys.get(key)
        return list(entry.dead_letters) if entry else []

    def since(self, key: str) -> float | None:
        """Epoch seconds the group of `key` entered its current state (None: not seen)."""
        entry = self._keys.get(key)
        return entry.since if entry else None

    def cold_start(self, key: str) -> float | None:
        """Seconds of the last cold start of `key` (None: never measured)."""
        entry = self._keys.get(key)
        return entry.cold_start if entry else None

    def _entry(self, key: str) -> _Key:
        entry = self._keys.get(key)
        if entry is None:
            while len(self._keys) >= self.max_keys:
                self._keys.popitem(last=False)  # the key quiet for longest
            entry = _Key(
                events=collections.deque(maxlen=self.max_events),
                dead_letters=collections.deque(maxlen=self.max_dead_letters),
            )
            self._keys[key] = entry
        else:
            self._keys.move_to_end(key)
        return entry


_STATE_CHANGES = frozenset(
    {
        EventKind.REQUIRED,
        EventKind.ACTIVE_AGAIN,
        EventKind.UNBOUND,
        EventKind.STOPPED,
        EventKind.ADOPTED,
    }
)
