"""Repairs after the broker's events: a request queue someone else deleted or unbound is made
(or bound) again, that one alone, without listing every queue of the pool.

The broker's events (`broker_events`) name the queue; one this loop changed itself is known
by name (`queue_operations.OwnChanges`) and ignored. A key whose queue is gone or unbound is
withdrawn at once from what the loop publishes (the orphan processor then holds its requests
instead of forwarding them into a queue that sends them straight back), and stays so until a
pass repairs it. The repair waits `DELETED_GRACE`; an event naming a queue the loop cannot
place asks for a listing of every queue instead.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Mapping

from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects.migration import LegacyQueues
from osrdyne.controller._effects.queue_operations import OwnChanges
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.wire import PoolNames

#: Seconds between a request queue deleted (or unbound) by someone else and the loop making
#: (or binding) it again.
DELETED_GRACE = 1.0


class EventRepairs:
    """What the broker's events said someone else did to the pool's request queues."""

    def __init__(
        self,
        *,
        names: PoolNames,
        tracker: PoolStateTracker,
        legacy: LegacyQueues,
        own: OwnChanges,
        withdraw: Callable[..., None],
        poke: Callable[[], None],
    ) -> None:
        self._names = names
        self._tracker = tracker
        self._legacy = legacy
        self._own = own
        self._withdraw = withdraw
        self._poke = poke
        #: Broker events that asked for a pass (changes not made by this loop).
        self.pokes = 0
        #: Broker events that needed a full listing (a name this loop could not place).
        self.repairs = 0
        #: A broker event named a queue this loop cannot place: list every queue now.
        self.list_now = False
        #: Keys whose queue a broker event says was deleted (True) or unbound (False) by
        #: someone else: repaired on the next pass without listing every queue.
        self._repairs: dict[str, bool] = {}
        #: The same keys from the moment their event is heard until a pass repairs them:
        #: published as deleted (True) or unbound meanwhile (`published`).
        self._heard: dict[str, bool] = {}
        #: Keys whose queue's deletion was heard and waits out the grace (how many times).
        self._deletions: collections.Counter[str] = collections.Counter()

    def queue_changed(self, name: str, *, deleted: bool = True) -> None:
        """A broker event: queue `name` was deleted (or unbound, `deleted=False`). Unless this
        loop did it, the queue is made (or bound) again at once: only that one when its key
        is known, else after listing every queue."""
        if name in self._own:
            return
        self.pokes += 1
        key = self._key_of(name)
        if key is None:
            self.repairs += 1  # unknown name: list everything (the anti-entropy pass)
            self.list_now = True
            self._poke()
        else:
            # Made again only after a grace: RabbitMQ (3.10) can leave a consumer of the
            # deleted quorum queue attached, without its `basic.cancel`, to a queue of the
            # same name declared within milliseconds, and deliveries to it are never seen
            # by the worker (its consumer is restored only after the cancel). A binding's
            # removal waits as long: a deleted queue's bindings are removed (and heard)
            # before the queue itself, and binding a queue that is gone fails.
            if deleted:
                self._deletions[key] += 1
            # Not bound from now on, for the orphan processor, though repaired only later.
            self._heard[key] = self._heard.get(key, False) or deleted
            self._withdraw(key, gone=deleted)
            asyncio.get_running_loop().call_later(DELETED_GRACE, self._repair_later, key, deleted)

    def _repair_later(self, key: str, deleted: bool) -> None:
        if deleted:
            self._deletions[key] -= 1
            if self._deletions[key] <= 0:
                del self._deletions[key]
        elif key in self._deletions:
            # Its binding went with its queue, whose own repair (a moment later: its event
            # came second) makes it and binds it. Binding it now would fail on the missing
            # queue, and a failed pass lists every queue.
            return
        self._repairs[key] = self._repairs.get(key, False) or deleted
        self._poke()

    def _key_of(self, name: str) -> str | None:
        """The key of one of the pool's request queues by its name: the last listing's
        figures, or the name itself when it is the readable form."""
        key = self._names.key_of_queue(name)
        if key is not None and self._legacy.queue_name(key) == name:
            return key
        for candidate in self._tracker.state.value.groups:  # a hashed name: one pass of keys
            if self._legacy.queue_name(candidate) == name:
                return candidate
        return None

    def repair(self, actual: dict[str, GroupStatus]) -> None:
        """What broker events said someone else did to `actual`: a deleted queue is gone, an
        unbound one is unbound, so the next pass declares or binds it again."""
        repairs, self._repairs = self._repairs, {}
        for key, deleted in repairs.items():
            self._heard.pop(key, None)
            if deleted:
                actual.pop(key, None)
            elif actual.get(key) is GroupStatus.ACTIVE:
                actual[key] = GroupStatus.UNBOUND

    def published(self, actual: Mapping[str, GroupStatus]) -> dict[str, GroupStatus]:
        """What to publish of `actual`: the queues broker events said others deleted or
        unbound stay so until a pass repairs them (a pass within the repair's grace, for
        another key, must not say them bound again)."""
        published = dict(actual)
        for key, gone in self._heard.items():
            if gone:
                published.pop(key, None)
            elif published.get(key) is GroupStatus.ACTIVE:
                published[key] = GroupStatus.UNBOUND
        return published
