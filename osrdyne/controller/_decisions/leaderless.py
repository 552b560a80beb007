"""Which quorum request queues have had no leader long enough to be made again: a pure rule
with its clock passed in (`Suspects`), tested without a broker.

RabbitMQ 3.x never elects a leader for a quorum queue declared just before its node crashed
(its only Raft members stay followers at term 0: rabbitmq-server#10070, #13828), and such a
queue confirms no publish and takes no consumer, for ever. A queue is suspected when a
listing shows it without statistics (`leaderless`: a queue's statistics come from its
leader) and when a forward to it is not confirmed in time (`Suspects.suspect`). A suspect is
looked at twice, `queues.leaderless_after` seconds apart: still without a leader with every
member online, it is judged leaderless, and the request-queue loop deletes and declares it
again (`leaderless_queues`, which does the looking).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping

#: Queues suspected at once; more wait for the next listing.
MAX_SUSPECTS = 256


def leaderless(queue: Mapping[str, object]) -> bool:
    """Whether the management API shows a quorum queue with every member online and no
    leader: no statistics (`messages`), which only a leader reports."""
    members, online = queue.get("members"), queue.get("online")
    return (
        isinstance(members, list)
        and bool(members)
        and isinstance(online, list)
        and set(members) <= set(online)
        and not isinstance(queue.get("messages"), int)
    )


class Verdict(enum.Enum):
    #: It has a leader, is gone, or its group is no longer wanted: forgotten.
    CLEARED = "cleared"
    #: No leader at its first look: looked at again `after` seconds later.
    WATCHED = "watched"
    #: No leader at two looks `after` apart: to be deleted and declared again.
    LEADERLESS = "leaderless"
    #: Leaderless, but the pass may delete no more: still due, at the next pass.
    DEFERRED = "deferred"


@dataclasses.dataclass(frozen=True)
class Suspect:
    #: When the queue was first seen with no leader (None: not looked at yet).
    first: float | None
    #: When it is looked at next (the clock's time).
    due: float


class Suspects:
    """The keys whose request queue may have no leader, and when each is looked at next.

    `after` None: the pool does not look for leaderless queues (`queues.leaderless_after`
    unset, or classic queues); nothing is ever suspected."""

    def __init__(
        self, *, after: float | None, clock: Callable[[], float], limit: int = MAX_SUSPECTS
    ) -> None:
        self.after = after
        self._clock = clock
        self._limit = limit
        self._suspects: dict[str, Suspect] = {}

    def __len__(self) -> int:
        return len(self._suspects)

    def __contains__(self, key: object) -> bool:
        return key in self._suspects

    def get(self, key: str) -> Suspect:
        return self._suspects[key]

    def listed(self, figures: Mapping[str, Mapping[str, object]]) -> None:
        """A listing's queues (by key) that show no leader are suspects: the listing is
        their first look."""
        if self.after is None:
            return
        now = self._clock()
        for key, queue in figures.items():
            if leaderless(queue) and len(self._suspects) < self._limit:
                self._suspects.setdefault(key, Suspect(first=now, due=now + self.after))

    def suspect(self, key: str) -> bool:
        """`key`'s queue did not answer in time (a forward not confirmed): it is looked at
        now. True when it is a new suspect."""
        if self.after is None or key in self._suspects or len(self._suspects) >= self._limit:
            return False
        self._suspects[key] = Suspect(first=None, due=self._clock())
        return True

    def due(self) -> list[str]:
        """The suspects due a look now."""
        now = self._clock()
        return [key for key, suspect in self._suspects.items() if suspect.due <= now]

    def next_look(self) -> float | None:
        """Seconds until the next suspect is due a look (None: no suspect)."""
        if not self._suspects:
            return None
        now = self._clock()
        return max(0.0, min(s.due - now for s in self._suspects.values()))

    def judge(
        self, key: str, queue: Mapping[str, object] | None, *, wanted: bool, may_delete: bool
    ) -> Verdict:
        """What one look at suspect `key` found: `queue` is what the management API shows of
        its queue (None: gone); `wanted`, whether the loop still has the queue;
        `may_delete`, whether this pass may delete one more."""
        suspect = self._suspects[key]
        if queue is None or not leaderless(queue) or not wanted:
            del self._suspects[key]
            return Verdict.CLEARED
        if suspect.first is None:
            now = self._clock()
            self._suspects[key] = Suspect(first=now, due=now + (self.after or 0.0))
            return Verdict.WATCHED
        if not may_delete:
            return Verdict.DEFERRED
        del self._suspects[key]
        return Verdict.LEADERLESS

    def retry(self, key: str, suspect: Suspect, *, delay: float) -> None:
        """A look at `suspect` failed (the management API down or slow): it stays a suspect,
        as it was, due again in `delay` seconds."""
        self._suspects[key] = dataclasses.replace(suspect, due=self._clock() + delay)
