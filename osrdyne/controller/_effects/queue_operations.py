"""The request-queue loop's operations: a plan of `reconcile` applied to the broker.

Surplus first: the queues of stopped groups are deleted, then the others are created, bound
and unbound, all at the pace the broker keeps up with (`pacing`: a burst of new keys never
piles up unbounded declares in the broker). A queue is only deleted when it has no consumer
and both the broker (passive declare) and the management API count no message: a queue that
still holds requests, or that cannot be counted, brings its group back. Each deletion and
unbinding is noted (`OwnChanges`), so the broker's events of this loop's own changes are not
taken for someone else's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Mapping

import aio_pika.abc
import aio_pika.exceptions

from osrdyne import wire
from osrdyne.controller._broker_settings import QueueSettings
from osrdyne.controller._decisions import reconcile
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import topology
from osrdyne.controller._effects.channels import ChannelPool
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.migration import LegacyQueues
from osrdyne.controller._effects.pacing import AimdLimit
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.exceptions import OsrdyneError
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)

#: Seconds a deletion or unbinding of this loop's own is told apart from others' by name.
OWN_CHANGES_FOR = 60.0


class QueueBusy(OsrdyneError):
    """A queue to delete still has consumers: try again later."""


class QueueNotEmpty(OsrdyneError):
    """A queue to delete still holds requests: its group must serve them first."""


class QueueUnavailable(OsrdyneError):
    """The broker cannot say what a queue to delete holds (a quorum queue with no online
    member): kept, and its group required again, until it can be counted."""


class OwnChanges:
    """The queue names this loop deleted or unbound lately: the broker's events about them
    are its own (each forgotten after `OWN_CHANGES_FOR` seconds)."""

    def __init__(self) -> None:
        self._own: collections.OrderedDict[str, float] = collections.OrderedDict()

    def __contains__(self, name: object) -> bool:
        return name in self._own

    def note(self, name: str) -> None:
        """This loop deletes or unbinds `name` now."""
        now = time.monotonic()
        self._own[name] = now
        self._own.move_to_end(name)
        while self._own and now - next(iter(self._own.values())) > OWN_CHANGES_FOR:
            self._own.popitem(last=False)


class QueueOperations:
    """Applies the queue plan of each pass (`converge`)."""

    def __init__(
        self,
        *,
        channels: ChannelPool,
        api: ManagementApi,
        names: PoolNames,
        settings: QueueSettings,
        tracker: PoolStateTracker,
        metrics: ControllerMetrics,
        pacing: AimdLimit,
        legacy: LegacyQueues,
        own: OwnChanges,
        operation_timeout: float,
    ) -> None:
        self._channels = channels
        self._api = api
        self._names = names
        self._settings = settings
        self._tracker = tracker
        self._metrics = metrics
        self._pacing = pacing
        self._legacy = legacy
        self._own = own
        self._operation_timeout = operation_timeout
        #: When this loop created each key's quorum queue (monotonic), while it is younger
        #: than `queues.young_queue_hold` (`young_for`).
        self._created: dict[str, float] = {}

    async def converge(
        self, expected: Mapping[str, GroupStatus], actual: dict[str, GroupStatus]
    ) -> dict[str, str]:
        """Apply the plan from `actual` to `expected`, updating `actual` as each operation
        succeeds; return what failed, by key (tried again next pass)."""
        errors: dict[str, str] = {}
        actions = reconcile.plan_queues(expected, actual)
        deletes = [a for a in actions if a.op is reconcile.QueueOp.DELETE]
        await asyncio.gather(*(self._paced(a, actual, errors) for a in deletes))
        await asyncio.gather(
            *(
                self._paced(a, actual, errors)
                for a in actions
                if a.op is not reconcile.QueueOp.DELETE
            )
        )
        return errors

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

    async def _paced(
        self, action: reconcile.QueueAction, actual: dict[str, GroupStatus], errors: dict[str, str]
    ) -> None:
        """One operation, in a slot of the pace, bounded; its failure said in `errors`."""
        async with self._pacing.slot():
            try:
                async with asyncio.timeout(self._operation_timeout):
                    await self._apply(action, actual)
                self._pacing.success()
                self._metrics.queue_op_concurrency.set(self._pacing.limit)
            except TimeoutError:
                self._pacing.congestion()
                self._metrics.queue_op_concurrency.set(self._pacing.limit)
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
                self._pacing.congestion()
                errors[action.key] = f"{type(exc).__name__}: {exc}"
                logger.warning(
                    "request queue %s of %r failed: %s",
                    action.op,
                    action.key,
                    exc,
                    extra=logs.fields(pool=self._names.pool, key=action.key),
                )

    async def _apply(self, action: reconcile.QueueAction, actual: dict[str, GroupStatus]) -> None:
        key, name = action.key, self._legacy.queue_name(action.key)
        exchange = self._names.request_exchange
        # A queue of osrdyne 0.1 may have a name pamqp refuses: let it through for this one.
        names_check = wire.any_queue_name() if key in self._legacy else contextlib.nullcontext()
        async with self._channels.channel() as channel:
            with names_check:
                if action.op in (reconcile.QueueOp.DELETE, reconcile.QueueOp.UNBIND):
                    self._own.note(name)
                if action.op is reconcile.QueueOp.DELETE:
                    await self._delete(channel, name)
                    actual.pop(key, None)
                    self._legacy.forget(key)
                elif action.op is reconcile.QueueOp.UNBIND:
                    queue = await channel.get_queue(name, ensure=False)
                    await queue.unbind(exchange, routing_key=key)
                    actual[key] = GroupStatus.UNBOUND
                else:
                    if action.op is reconcile.QueueOp.CREATE:
                        self._legacy.forget(key)
                        name = self._names.request_queue(key)
                        await topology.declare_request_queue(
                            channel, name, names=self._names, settings=self._settings, key=key
                        )
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
