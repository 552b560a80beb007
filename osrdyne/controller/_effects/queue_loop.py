"""The request-queue control loop: make the broker's request queues match the expected state.

It creates and binds the queues of Active groups, unbinds those of Unbound groups and deletes
those of stopped groups, then publishes the generation it reached with the actual state, which
the orphan processor waits on before it forwards a request. A queue is only deleted when it
has no consumer and both the broker (passive declare) and the management API count no
message: a queue that still holds requests, or that cannot be counted, brings its group back.
Operations run concurrently at the pace the broker keeps up with (`pacing`: a burst of new
keys never piles up unbounded declares in the broker).

A quorum request queue with no leader while its members are all online is looked at twice,
`queues.leaderless_after` seconds apart, and deleted and declared again if it still has none:
RabbitMQ 3.x never elects a leader for a quorum queue declared just before its node crashed
(its only Raft members stay followers at term 0: rabbitmq-server#10070, #13828), and such a
queue confirms no publish and takes no consumer, for ever. It holds nothing: either no leader
ever appended to its log, or (RabbitMQ 3.10.8, rabbitmq-server#15725) its member came back
from the crash as a new, empty one, what its first leader had confirmed lost in the broker
(docs/reliability.md). A queue is suspected when a listing shows it without statistics (a
queue's statistics come from its leader) and when a forward to it is not confirmed in time
(`suspect`).

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
import collections
import contextlib
import dataclasses
import logging
import time
import types
from collections.abc import Mapping

import aio_pika.abc
import aio_pika.exceptions

from osrdyne import wire
from osrdyne.controller._decisions import reconcile
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import migration, topology
from osrdyne.controller._effects.channels import ChannelPool
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.pacing import AimdLimit
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.controller._effects.watch import Watch
from osrdyne.controller._settings import QueueSettings
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)

#: Seconds a deletion or unbinding of this loop's own is told apart from others' by name.
_OWN_EVENTS_FOR = 60.0
#: Seconds between a request queue deleted (or unbound) by someone else and the loop making
#: (or binding) it again.
_DELETED_GRACE = 1.0
#: Queues suspected of having no leader at once; more wait for the next listing.
_MAX_SUSPECTS = 256
#: Leaderless queues deleted per pass of the loop (at once): the broker holds each deletion
#: 5 s waiting for a leader, and 91 at once kept a controller's own operations waiting past
#: its lease (seen in CI); the others wait for the next passes.
_LEADERLESS_DELETES = 4


@dataclasses.dataclass(frozen=True)
class _Suspect:
    #: When the queue was first seen with no leader (None: not looked at yet).
    first: float | None
    #: When it is looked at next (`time.monotonic()`).
    due: float


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


@dataclasses.dataclass(frozen=True)
class QueuesReached:
    """The last expected generation the loop converged to, and what exists now."""

    generation: int
    actual: Mapping[str, GroupStatus]
    errors: Mapping[str, str]


class QueueBusy(Exception):
    """A queue to delete still has consumers: try again later."""


class QueueNotEmpty(Exception):
    """A queue to delete still holds requests: its group must serve them first."""


class QueueUnavailable(Exception):
    """The broker cannot say what a queue to delete holds (a quorum queue with no online
    member): kept, and its group required again, until it can be counted."""


class RequestQueueLoop:
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
        self._settings = settings
        self._tracker = tracker
        self._interval = interval
        self._listing_interval = interval if listing_interval is None else listing_interval
        #: Whether broker events are heard (`broker_events`): they say what someone else
        #: changed, so the full listing runs only every `listing_interval`.
        self.events_heard = False
        self._metrics = metrics
        #: Broker operations at once: paced by how the broker keeps up (`pacing`).
        self.pacing = AimdLimit(initial=concurrency, maximum=max_concurrency)
        self._operation_timeout = operation_timeout
        #: Keys whose queue is an adopted one of osrdyne 0.1, and its name (the raw key).
        self._legacy: dict[str, str] = {}
        #: The last listing of the pool's request queues (names, bindings and figures), what
        #: `/status` shows; None before the first.
        self.listing: topology.RequestQueues | None = None
        #: Listings made (tests and benchmarks read it).
        self.listings = 0
        #: Broker events that asked for a listing (changes not made by this loop).
        self.pokes = 0
        #: Someone else changed the pool's queues (a broker event): a pass now.
        self._poked = asyncio.Event()
        #: A broker event named a queue this loop cannot place: list every queue now.
        self._list_now = False
        #: Keys whose queue a broker event says was deleted (True) or unbound (False) by
        #: someone else: repaired on the next pass without listing every queue.
        self._repairs: dict[str, bool] = {}
        #: The same keys from the moment their event is heard until a pass repairs them:
        #: published as deleted (True) or unbound meanwhile (`_published`).
        self._heard: dict[str, bool] = {}
        #: When this loop created each key's quorum queue (monotonic), while it is younger
        #: than `queues.young_queue_hold` (`young_for`).
        self._created: dict[str, float] = {}
        #: Keys whose queue's deletion was heard and waits out the grace (how many times).
        self._deletions: collections.Counter[str] = collections.Counter()
        #: Broker events that needed a full listing (a name this loop could not place).
        self.repairs = 0
        #: Queue names this loop deleted or unbound lately (their events are its own).
        self._own: collections.OrderedDict[str, float] = collections.OrderedDict()
        #: Keys whose queue may have no leader: when it was first seen without one, and when
        #: it is looked at next.
        self._suspects: dict[str, _Suspect] = {}
        self.reached: Watch[QueuesReached] = Watch(
            QueuesReached(0, types.MappingProxyType({}), types.MappingProxyType({}))
        )

    async def run(self, initial: Mapping[str, GroupStatus] | None = None) -> None:
        if initial is None:
            initial = await self._list()
        elif isinstance(initial, topology.RequestQueues):
            self._legacy = dict(initial.legacy)
            self.listing = initial
            self._suspect_leaderless(initial)
        actual = dict(initial)
        listed_at = time.monotonic()
        try:
            while True:
                version = self._tracker.state.version
                target = self._tracker.state.value
                started = time.monotonic()
                errors = await self._converge(target.groups, actual)
                await self._look_at_suspects(actual)
                self._metrics.loop_seconds.labels("queues").observe(time.monotonic() - started)
                self.reached.set(
                    QueuesReached(
                        target.generation,
                        types.MappingProxyType(self._published(actual)),
                        types.MappingProxyType(errors),
                    )
                )
                # Anti-entropy: trust the broker, not memory. Once per listing interval,
                # also while changes keep coming (a busy pool's figures in `/status` stay
                # fresh); rarely while broker events say what others change.
                every = self._interval if errors else self.listing_interval
                next_listing = listed_at + every - time.monotonic()
                if next_listing <= 0 or self._list_now:
                    self._list_now = False
                    actual = await self._list()
                    listed_at = time.monotonic()
                    continue
                wait = min(self._interval, 1.0) if errors else self._interval
                if self._suspects:
                    wait = min(wait, self._next_look())
                await self._wait_change(version, min(wait, next_listing))
                # The queues an event named are repaired without listing every queue.
                self._repair(actual)
        finally:
            await self._channels.close()

    @property
    def listing_interval(self) -> float:
        """Seconds between two full listings: `listing_interval` while broker events are
        heard, else the loop's interval."""
        return self._listing_interval if self.events_heard else self._interval

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
            self._list_now = True
            self._poked.set()
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
            asyncio.get_running_loop().call_later(_DELETED_GRACE, self._repair_later, key, deleted)

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
        self._poked.set()

    def _key_of(self, name: str) -> str | None:
        """The key of one of the pool's request queues by its name: the last listing's
        figures, or the name itself when it is the readable form."""
        key = self._names.key_of_queue(name)
        if key is not None and self._queue_name(key) == name:
            return key
        for candidate in self._tracker.state.value.groups:  # a hashed name: one pass of keys
            if self._queue_name(candidate) == name:
                return candidate
        return None

    def _repair(self, actual: dict[str, GroupStatus]) -> None:
        """What broker events said someone else did to `actual`: a deleted queue is gone, an
        unbound one is unbound, so the next pass declares or binds it again."""
        repairs, self._repairs = self._repairs, {}
        for key, deleted in repairs.items():
            self._heard.pop(key, None)
            if deleted:
                actual.pop(key, None)
            elif actual.get(key) is GroupStatus.ACTIVE:
                actual[key] = GroupStatus.UNBOUND

    def young_for(self, key: str) -> float:
        """Seconds until `key`'s request queue is `queues.young_queue_hold` old, when this
        loop created it as a quorum queue less than that ago; else 0. The orphan processor
        holds its ack of a request forwarded into such a queue until then: RabbitMQ 3.10
        can bring a quorum queue declared a few hundred ms before its node was killed back
        as a new, empty member, losing what it had confirmed (rabbitmq-server#15725,
        docs/reliability.md); the orphan, unacked, is delivered again instead."""
        hold = self._settings.young_queue_hold
        if self._settings.type != "quorum" or hold <= 0:
            return 0.0
        now = time.monotonic()
        for old in [k for k, at in self._created.items() if now - at >= hold]:
            del self._created[old]
        created = self._created.get(key)
        return 0.0 if created is None else created + hold - now

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

    def _published(self, actual: Mapping[str, GroupStatus]) -> dict[str, GroupStatus]:
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

    def _mine(self, name: str) -> None:
        """This loop deletes or unbinds `name` now (forgotten after `_OWN_EVENTS_FOR`)."""
        now = time.monotonic()
        self._own[name] = now
        self._own.move_to_end(name)
        while self._own and now - next(iter(self._own.values())) > _OWN_EVENTS_FOR:
            self._own.popitem(last=False)

    async def _list(self) -> dict[str, GroupStatus]:
        listed = await topology.list_request_queues(self._api, self._names)
        self._legacy = dict(listed.legacy)
        self.listing = listed
        self.listings += 1
        self._suspect_leaderless(listed)
        return dict(listed)

    def _suspect_leaderless(self, listed: topology.RequestQueues) -> None:
        """The listed queues that show no leader are suspects (the listing is their first
        look)."""
        after, now = self._settings.leaderless_after, time.monotonic()
        for key, figures in listed.figures.items():
            if after is not None and leaderless(figures) and len(self._suspects) < _MAX_SUSPECTS:
                self._suspects.setdefault(key, _Suspect(first=now, due=now + after))

    def suspect(self, key: str) -> None:
        """`key`'s queue did not answer in time (a forward not confirmed): the loop looks at
        whether it has a leader (`queues.leaderless_after`)."""
        if (
            self._settings.leaderless_after is not None
            and key not in self._suspects
            and len(self._suspects) < _MAX_SUSPECTS
        ):
            self._suspects[key] = _Suspect(first=None, due=time.monotonic())
            self._poked.set()

    def _next_look(self) -> float:
        """Seconds until the next suspect is due a look."""
        now = time.monotonic()
        return max(0.0, min((s.due - now for s in self._suspects.values()), default=0.0))

    async def _look_at_suspects(self, actual: dict[str, GroupStatus]) -> None:
        """Look at the suspects that are due, at the broker's pace; delete each queue that had
        no leader at two looks `leaderless_after` apart (a pass declares it again after
        `_DELETED_GRACE`)."""
        after = self._settings.leaderless_after
        if after is None or self._settings.type != "quorum":
            self._suspects.clear()
            return
        now = time.monotonic()
        due = [k for k, s in self._suspects.items() if s.due <= now]
        deletes = [_LEADERLESS_DELETES]
        await asyncio.gather(*(self._look(key, after, actual, deletes) for key in due))
        if len(due) and not deletes[0]:
            self._poked.set()  # more may be due: the next pass, without waiting

    async def _look(
        self, key: str, after: float, actual: dict[str, GroupStatus], deletes: list[int]
    ) -> None:
        """One look at a suspect; a deletion only while `deletes[0]` (this pass's budget)
        lasts, else the suspect stays due."""
        suspect, name = self._suspects[key], self._queue_name(key)
        async with self.pacing.slot():
            try:
                # The broker's own deletion of such a queue waits for a leader (5 s).
                async with asyncio.timeout(self._operation_timeout + 5):
                    info = await self._api.queue(name)
                    if info is None or not leaderless(info) or key not in actual:
                        del self._suspects[key]
                    elif suspect.first is None:
                        now = time.monotonic()
                        self._suspects[key] = _Suspect(first=now, due=now + after)
                    elif deletes[0] > 0:
                        deletes[0] -= 1
                        del self._suspects[key]
                        await self._delete_leaderless(key, name, actual, suspect.first)
            except Exception as exc:  # the management API down or slow: a look later
                self._suspects[key] = dataclasses.replace(
                    suspect, due=time.monotonic() + min(after, self._interval)
                )
                logger.warning(
                    "could not look at the request queue of %r for a leader: %s",
                    key,
                    logs.redact(f"{type(exc).__name__}: {exc}"),
                    extra=logs.fields(pool=self._names.pool, key=key),
                )

    async def _delete_leaderless(
        self, key: str, name: str, actual: dict[str, GroupStatus], first: float
    ) -> None:
        """Unbind `key`'s queue (what is published meanwhile goes to the orphans, which hold
        it: the key is withdrawn first), and delete it unless the broker counts a request or
        a consumer in it (then it has a leader after all: the statistics were late, and the
        next pass, at once, binds it again)."""
        self._mine(name)
        self._withdraw(key)
        async with self._channels.channel() as channel:
            queue = await channel.get_queue(name, ensure=False)
            await queue.unbind(self._names.request_exchange, routing_key=key)
            actual[key] = GroupStatus.UNBOUND
            counted = (await channel.declare_queue(name, passive=True)).declaration_result
        if counted.message_count or counted.consumer_count:
            logger.info(
                "request queue of %r showed no statistics but holds %d request(s) and %d "
                "consumer(s): kept",
                key,
                counted.message_count,
                counted.consumer_count,
                extra=logs.fields(pool=self._names.pool, key=key),
            )
            self._poked.set()
            return
        await self._api.delete_queue(name)
        actual.pop(key, None)
        self._legacy.pop(key, None)
        self._metrics.queue_ops.labels("leaderless_delete").inc()
        # Declared again after the grace a deletion by someone else gets (`queue_changed`).
        asyncio.get_running_loop().call_later(_DELETED_GRACE, self._poked.set)
        logger.warning(
            "request queue of %r had no leader for %.0fs with every member online (a quorum "
            "queue the broker never elected a leader for, as after a crash during its "
            "declaration): deleted, declared again",
            key,
            time.monotonic() - first,
            extra=logs.fields(pool=self._names.pool, key=key),
        )

    def _queue_name(self, key: str) -> str:
        """The name of `key`'s queue: an adopted queue of osrdyne 0.1 keeps its own name (its
        workers consume it) until its group stops; every new queue gets the current name."""
        return self._legacy.get(key) or self._names.request_queue(key)

    async def _converge(
        self, expected: Mapping[str, GroupStatus], actual: dict[str, GroupStatus]
    ) -> dict[str, str]:
        errors: dict[str, str] = {}

        async def apply(action: reconcile.QueueAction) -> None:
            async with self.pacing.slot():
                try:
                    async with asyncio.timeout(self._operation_timeout):
                        await self._apply(action, actual)
                    self.pacing.success()
                    self._metrics.queue_op_concurrency.set(self.pacing.limit)
                except TimeoutError:
                    self.pacing.congestion()
                    self._metrics.queue_op_concurrency.set(self.pacing.limit)
                    errors[action.key] = (
                        f"{action.op.value} took over {self._operation_timeout}s: retried"
                    )
                    logger.error(
                        "request queue %s of %r took over %.0fs: abandoned, retried next pass",
                        action.op.value,
                        action.key,
                        self._operation_timeout,
                        extra=logs.fields(pool=self._names.pool, key=action.key),
                    )
                except QueueNotEmpty:
                    errors[action.key] = "queue still holds requests: group required again"
                    self._tracker.require(action.key, cause="requests left in its queue")
                except QueueUnavailable:
                    errors[action.key] = (
                        "queue cannot be counted (no stats yet, or no online member): kept, "
                        "group required again"
                    )
                    logger.warning(
                        "request queue of %r cannot be counted (no stats yet, or a quorum "
                        "queue with no online member): not deleted",
                        action.key,
                        extra=logs.fields(pool=self._names.pool, key=action.key),
                    )
                    self._tracker.require(action.key, cause="a queue that cannot be counted")
                except QueueBusy:
                    errors[action.key] = "queue still has consumers"
                except (aio_pika.exceptions.AMQPError, ConnectionError) as exc:
                    self.pacing.congestion()
                    errors[action.key] = f"{type(exc).__name__}: {exc}"
                    logger.warning(
                        "request queue %s of %r failed: %s",
                        action.op,
                        action.key,
                        exc,
                        extra=logs.fields(pool=self._names.pool, key=action.key),
                    )

        actions = reconcile.plan_queues(expected, actual)
        deletes = [a for a in actions if a.op is reconcile.QueueOp.DELETE]
        await asyncio.gather(*(apply(a) for a in deletes))
        await asyncio.gather(*(apply(a) for a in actions if a.op is not reconcile.QueueOp.DELETE))
        retiring = [key for key in self._legacy if key in expected and key in actual]
        await asyncio.gather(*(self._retire(key, actual, errors) for key in retiring))
        return errors

    async def _retire(
        self, key: str, actual: dict[str, GroupStatus], errors: dict[str, str]
    ) -> None:
        """One step of retiring the 0.1 queue of `key` (`migration`)."""
        async with self.pacing.slot():
            try:
                async with asyncio.timeout(self._operation_timeout):
                    async with self._channels.channel() as channel:
                        current = await self._declare(channel, self._names.request_queue(key), key)
                        with wire.any_queue_name():  # 0.1 names may be refused by pamqp
                            retired = await migration.retire(
                                channel,
                                names=self._names,
                                key=key,
                                old=self._legacy[key],
                                status=actual[key],
                                current=current,
                            )
                if retired:
                    self._legacy.pop(key, None)
            except (TimeoutError, aio_pika.exceptions.AMQPError, ConnectionError) as exc:
                errors[key] = f"retiring its queue of osrdyne 0.1: {type(exc).__name__}: {exc}"
                logger.warning(
                    "request queue of %r of osrdyne 0.1 not retired yet: %s",
                    key,
                    errors[key],
                    extra=logs.fields(pool=self._names.pool, key=key),
                )

    async def _apply(self, action: reconcile.QueueAction, actual: dict[str, GroupStatus]) -> None:
        key, name = action.key, self._queue_name(action.key)
        exchange = self._names.request_exchange
        # A queue of osrdyne 0.1 may have a name pamqp refuses: let it through for this one.
        names_check = wire.any_queue_name() if key in self._legacy else contextlib.nullcontext()
        async with self._channels.channel() as channel:
            with names_check:
                if action.op in (reconcile.QueueOp.DELETE, reconcile.QueueOp.UNBIND):
                    self._mine(name)
                if action.op is reconcile.QueueOp.DELETE:
                    await self._delete(channel, name)
                    actual.pop(key, None)
                    self._legacy.pop(key, None)
                elif action.op is reconcile.QueueOp.UNBIND:
                    queue = await channel.get_queue(name, ensure=False)
                    await queue.unbind(exchange, routing_key=key)
                    actual[key] = GroupStatus.UNBOUND
                else:
                    if action.op is reconcile.QueueOp.CREATE:
                        self._legacy.pop(key, None)
                        name = self._names.request_queue(key)
                        await self._declare(channel, name, key)
                        self._created[key] = time.monotonic()
                        actual[key] = GroupStatus.UNBOUND
                    if action.op is reconcile.QueueOp.BIND or action.bind:
                        queue = await channel.get_queue(name, ensure=False)
                        await queue.bind(exchange, routing_key=key)
                        actual[key] = GroupStatus.ACTIVE
        self._metrics.queue_ops.labels(action.op.value).inc()
        logger.info(
            "request queue of %r: %s",
            key,
            action.op.value,
            extra=logs.fields(pool=self._names.pool, key=key, generation=self._tracker.generation),
        )

    async def _declare(
        self, channel: aio_pika.abc.AbstractChannel, name: str, key: str
    ) -> aio_pika.abc.AbstractQueue:
        arguments = topology.request_queue_arguments(self._names, self._settings, key)
        try:
            return await channel.declare_queue(name, durable=True, arguments=arguments)
        except aio_pika.exceptions.ChannelPreconditionFailed as exc:
            # It exists with other arguments (e.g. the queue type changed): keep serving it.
            logger.warning("request queue %r exists with other arguments: %s", name, exc)
            return await channel.get_queue(name, ensure=False)

    async def _delete(self, channel: aio_pika.abc.AbstractChannel, name: str) -> None:
        # Quorum queues refuse if-empty/if-unused (RabbitMQ answers with a connection error),
        # so check first; the queue is unbound, so nothing new can arrive in between.
        try:
            queue = await channel.declare_queue(name, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return
        result = queue.declaration_result
        if result.consumer_count:
            raise QueueBusy(name)
        if result.message_count:
            raise QueueNotEmpty(name)
        # A zero is not proof: RabbitMQ answers 0 messages for a quorum queue whose Raft
        # member is down, whatever it holds. Ask the management API as well, and keep a
        # queue it cannot count (that is how a member that did not come back after a broker
        # crash shows: no `messages`, no online member; a queue younger than the broker's
        # statistics interval has no `messages` yet either, and waits for the next try).
        info = await self._api.queue(name)
        if info is None:
            return
        messages = info.get("messages")
        if not isinstance(messages, int):
            raise QueueUnavailable(name)
        if messages:
            raise QueueNotEmpty(name)
        await queue.delete(if_unused=False, if_empty=self._settings.type == "classic")
