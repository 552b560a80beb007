"""The request-queue control loop: make the broker's request queues match the expected state.

Each pass applies the plan from the actual state to the expected one (`queue_operations`:
create and bind the queues of Active groups, unbind those of Unbound groups, delete those of
stopped groups, at the broker's pace), takes one step of retiring each adopted queue of
osrdyne 0.1 (`migration`), looks at the queues suspected of having no leader
(`leaderless_queues`, judged by the pure rule of `leaderless`), and publishes the generation
it reached with the actual state, which the orphan processor waits on before it forwards a
request. Between passes it waits for a change of the expected state, or for a broker event
that someone else deleted or unbound a queue (`queue_repairs`: that one is repaired alone),
or for its interval; it lists every queue of the pool (anti-entropy: the broker, not memory)
every `listing_interval` while broker events are heard, else every `interval`.

What the loop publishes says a key's queue is bound (ready for forwarded orphans) only while
it is: a key is withdrawn at once (`_withdraw`) when its queue is unbound or deleted while its
group stays Active (a leaderless queue's deletion, someone else's deletion or unbinding), not
at the end of the pass. Else the orphan processor would forward the key's requests into the
unbound queue, which the alternate exchange sends straight back to the orphans, in a loop,
for as long as the pass lasts (the broker holds a leaderless queue's deletion 5 s: hundreds
of forwards of one request). The loop's own unbinding and deletion of a group that is no
longer Active need no such care: an orphan makes its group Active again, at a generation
past the one the pass publishes, and waits for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import types
from collections.abc import Mapping

import aio_pika.abc

from osrdyne.controller._broker_settings import QueueSettings
from osrdyne.controller._decisions.leaderless import Suspects
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import topology
from osrdyne.controller._effects.channels import ChannelPool
from osrdyne.controller._effects.leaderless_queues import LeaderlessQueues
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.migration import LegacyQueues
from osrdyne.controller._effects.pacing import AimdLimit
from osrdyne.controller._effects.queue_operations import OwnChanges, QueueOperations
from osrdyne.controller._effects.queue_repairs import EventRepairs
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.controller._effects.watch import Watch
from osrdyne.ops.metrics import ControllerMetrics
from osrdyne.wire import PoolNames


@dataclasses.dataclass(frozen=True)
class QueuesReached:
    """The last expected generation the loop converged to, and what exists now."""

    generation: int
    actual: Mapping[str, GroupStatus]
    errors: Mapping[str, str]


class RequestQueueLoop:
    """Runs the passes and wires their parts: operations, migration, repairs after broker
    events, leaderless queues."""

    def __init__(
        self,
        *,
        connection: aio_pika.abc.AbstractConnection,
        api: ManagementApi,
        names: PoolNames,
        settings: QueueSettings,
        tracker: PoolStateTracker,
        interval: float,
        listing_interval: float | None = None,
        metrics: ControllerMetrics,
        operation_timeout: float = 10.0,
        concurrency: int = 8,
        max_concurrency: int = 32,
    ) -> None:
        # Channels are opened when first needed: as many as operations may run at once. (A
        # ceiling of 32 once drew "second 'channel.open' seen" connection errors: aiormq lost
        # the `close-ok` of channels the broker closed when its write queue was full, fixed
        # by osrdyne.wire._aiormq; the ceiling was 8 until then.)
        self._channels = ChannelPool(connection, size=max_concurrency)
        self._api = api
        self._names = names
        self._tracker = tracker
        self._interval = interval
        self._listing_interval = interval if listing_interval is None else listing_interval
        #: Whether broker events are heard (`broker_events`): they say what someone else
        #: changed, so the full listing runs only every `listing_interval`.
        self.events_heard = False
        self._metrics = metrics
        #: Broker operations at once: paced by how the broker keeps up (`pacing`).
        self.pacing = AimdLimit(initial=concurrency, maximum=max_concurrency)
        #: The last listing of the pool's request queues (names, bindings and figures), what
        #: `/status` shows; None before the first.
        self.listing: topology.RequestQueues | None = None
        #: Listings made (tests and benchmarks read it).
        self.listings = 0
        #: Someone else changed the pool's queues (a broker event), or more is due: a pass now.
        self._poked = asyncio.Event()
        self.reached: Watch[QueuesReached] = Watch(
            QueuesReached(0, types.MappingProxyType({}), types.MappingProxyType({}))
        )
        self._legacy = LegacyQueues(
            names=names,
            settings=settings,
            channels=self._channels,
            pacing=self.pacing,
            operation_timeout=operation_timeout,
        )
        own = OwnChanges()
        self._operations = QueueOperations(
            channels=self._channels,
            api=api,
            names=names,
            settings=settings,
            tracker=tracker,
            metrics=metrics,
            pacing=self.pacing,
            legacy=self._legacy,
            own=own,
            operation_timeout=operation_timeout,
        )
        self._events = EventRepairs(
            names=names,
            tracker=tracker,
            legacy=self._legacy,
            own=own,
            withdraw=self._withdraw,
            poke=self._poked.set,
        )
        quorum = settings.type == "quorum"
        self._leaderless = LeaderlessQueues(
            suspects=Suspects(
                after=settings.leaderless_after if quorum else None, clock=time.monotonic
            ),
            api=api,
            channels=self._channels,
            names=names,
            legacy=self._legacy,
            own=own,
            pacing=self.pacing,
            metrics=metrics,
            operation_timeout=operation_timeout,
            interval=interval,
            withdraw=self._withdraw,
            poke=self._poked.set,
        )

    @property
    def pokes(self) -> int:
        """Broker events that asked for a pass (changes not made by this loop)."""
        return self._events.pokes

    @property
    def repairs(self) -> int:
        """Broker events that needed a full listing (a name this loop could not place)."""
        return self._events.repairs

    async def run(self, initial: Mapping[str, GroupStatus] | None = None) -> None:
        suspects = self._leaderless.suspects
        if initial is None:
            initial = await self._list()
        elif isinstance(initial, topology.RequestQueues):
            self._legacy.adopt(initial.legacy)
            self.listing = initial
            suspects.listed(initial.figures)
        actual = dict(initial)
        listed_at = time.monotonic()
        try:
            while True:
                version = self._tracker.state.version
                target = self._tracker.state.value
                started = time.monotonic()
                errors = await self._operations.converge(target.groups, actual)
                await self._legacy.retire(target.groups, actual, errors)
                await self._leaderless.look(actual)
                self._metrics.loop_seconds.labels("queues").observe(time.monotonic() - started)
                self.reached.set(
                    QueuesReached(
                        target.generation,
                        types.MappingProxyType(self._events.published(actual)),
                        types.MappingProxyType(errors),
                    )
                )
                # Anti-entropy: trust the broker, not memory. Once per listing interval,
                # also while changes keep coming (a busy pool's figures in `/status` stay
                # fresh); rarely while broker events say what others change.
                every = self._interval if errors else self.listing_interval
                next_listing = listed_at + every - time.monotonic()
                if next_listing <= 0 or self._events.list_now:
                    self._events.list_now = False
                    actual = await self._list()
                    listed_at = time.monotonic()
                    continue
                wait = min(self._interval, 1.0) if errors else self._interval
                next_look = suspects.next_look()
                if next_look is not None:
                    wait = min(wait, next_look)
                await self._wait_change(version, min(wait, next_listing))
                # The queues an event named are repaired without listing every queue.
                self._events.repair(actual)
        finally:
            await self._channels.close()

    @property
    def listing_interval(self) -> float:
        """Seconds between two full listings: `listing_interval` while broker events are
        heard, else the loop's interval."""
        return self._listing_interval if self.events_heard else self._interval

    def queue_changed(self, name: str, *, deleted: bool = True) -> None:
        """A broker event: queue `name` was deleted (or unbound, `deleted=False`) (see
        `queue_repairs.EventRepairs.queue_changed`)."""
        self._events.queue_changed(name, deleted=deleted)

    def suspect(self, key: str) -> None:
        """`key`'s queue did not answer in time (a forward not confirmed): the loop looks at
        whether it has a leader (`queues.leaderless_after`)."""
        if self._leaderless.suspects.suspect(key):
            self._poked.set()

    def young_for(self, key: str) -> float:
        """Seconds the orphan processor holds its ack of a request forwarded into `key`'s
        queue, a young quorum queue (`queue_operations.QueueOperations.young_for`)."""
        return self._operations.young_for(key)

    async def _wait_change(self, version: int, timeout: float) -> None:
        """Until the expected state changes, a broker event asks for a pass, or `timeout`."""
        changed = asyncio.ensure_future(self._tracker.state.changed_since(version))
        poked = asyncio.ensure_future(self._poked.wait())
        try:
            done, _ = await asyncio.wait(
                {changed, poked}, timeout=timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            changed.cancel()
            poked.cancel()
        if poked in done:
            self._poked.clear()

    def _withdraw(self, key: str, *, gone: bool = False) -> None:
        """Publish at once that `key`'s queue is no longer bound (`gone`: no longer exists),
        before the pass ends: the orphan processor then holds the key's requests until a pass
        binds its queue again, instead of forwarding them into a queue that sends them back
        to the orphans. The generation stays; the pass's end publishes all it reached."""
        reached = self.reached.value
        if reached.actual.get(key) is not GroupStatus.ACTIVE:
            return
        actual = dict(reached.actual)
        if gone:
            del actual[key]
        else:
            actual[key] = GroupStatus.UNBOUND
        self.reached.set(dataclasses.replace(reached, actual=types.MappingProxyType(actual)))

    async def _list(self) -> dict[str, GroupStatus]:
        listed = await topology.list_request_queues(self._api, self._names)
        self._legacy.adopt(listed.legacy)
        self.listing = listed
        self.listings += 1
        self._leaderless.suspects.listed(listed.figures)
        return dict(listed)
