"""Retiring request queues named as osrdyne 0.1 named them, without losing a request.

osrdyne 0.1 named a request queue after the raw key (`P-req-infra=42`); 0.2 names it in an
encoding every AMQP client accepts (`P-req-infra+3D42`, `_queue_names`). Keys made only of
kept characters have the same name in both; the others have an old queue after an upgrade,
which the queue loop adopts under its key (`topology.list_request_queues`) and retires:

* while workers of 0.1 still consume the old queue, it stays the key's queue (bound, unbound
  and deleted like any other); the current queue is declared beside it, unbound, so workers
  started since (given the current name) find a queue to consume;
* once nobody consumes the old queue, the current queue takes its binding (the old one is
  unbound first: a request in between is an orphan, forwarded once the current queue is
  bound), the requests still waiting in the old queue are republished to the request exchange
  with their key (publisher confirms, then acked: at least once, never lost), and the old
  queue, unbound, unconsumed and found empty, is deleted.

`LegacyQueues` is the queue loop's part of it: which keys have an adopted queue (its name is
theirs until they are retired) and one step of retiring each, every pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import aio_pika.abc
import aio_pika.exceptions

from osrdyne import wire
from osrdyne.controller._broker_settings import QueueSettings
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import replies, topology
from osrdyne.controller._effects.channels import ChannelPool
from osrdyne.controller._effects.pacing import AimdLimit
from osrdyne.ops import logs
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)


class LegacyQueues:
    """The keys whose request queue is an adopted one of osrdyne 0.1, by its name (the raw
    key), and the retiring of each, one step a pass, at the broker's pace."""

    def __init__(
        self,
        *,
        names: PoolNames,
        settings: QueueSettings,
        channels: ChannelPool,
        pacing: AimdLimit,
        operation_timeout: float,
    ) -> None:
        self._names = names
        self._settings = settings
        self._channels = channels
        self._pacing = pacing
        self._operation_timeout = operation_timeout
        self._legacy: dict[str, str] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._legacy

    def adopt(self, legacy: Mapping[str, str]) -> None:
        """A listing's adopted queues (key -> name): they replace what was known."""
        self._legacy = dict(legacy)

    def forget(self, key: str) -> None:
        """`key`'s queue is gone, or a new one of the current name was made."""
        self._legacy.pop(key, None)

    def queue_name(self, key: str) -> str:
        """The name of `key`'s queue: an adopted queue of osrdyne 0.1 keeps its own name (its
        workers consume it) until its group stops; every new queue gets the current name."""
        return self._legacy.get(key) or self._names.request_queue(key)

    async def retire(
        self,
        expected: Mapping[str, GroupStatus],
        actual: Mapping[str, GroupStatus],
        errors: dict[str, str],
    ) -> None:
        """One step of retiring each adopted queue whose key is expected and has a queue;
        what fails is said in `errors` and tried again next pass."""
        retiring = [key for key in self._legacy if key in expected and key in actual]
        await asyncio.gather(*(self._retire(key, actual[key], errors) for key in retiring))

    async def _retire(self, key: str, status: GroupStatus, errors: dict[str, str]) -> None:
        async with self._pacing.slot():
            try:
                async with asyncio.timeout(self._operation_timeout):
                    async with self._channels.channel() as channel:
                        name = self._names.request_queue(key)
                        current = await topology.declare_request_queue(
                            channel, name, names=self._names, settings=self._settings, key=key
                        )
                        with wire.any_queue_name():  # 0.1 names may be refused by pamqp
                            retired = await retire(
                                channel,
                                names=self._names,
                                key=key,
                                old=self._legacy[key],
                                status=status,
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


async def retire(
    channel: aio_pika.abc.AbstractChannel,
    *,
    names: PoolNames,
    key: str,
    old: str,
    status: GroupStatus,
    current: aio_pika.abc.AbstractQueue,
) -> bool:
    """One step of retiring `old`, the 0.1 queue of `key` whose expected binding is `status`;
    `current` is the key's current queue, already declared. True once `old` is gone."""
    try:
        queue = await channel.declare_queue(old, passive=True)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return True
    if queue.declaration_result.consumer_count:
        return False  # its workers of 0.1 still serve it
    exchange = names.request_exchange
    await queue.unbind(exchange, routing_key=key)
    if status is GroupStatus.ACTIVE:
        await current.bind(exchange, routing_key=key)
    else:
        await current.unbind(exchange, routing_key=key)
    moved = await move_requests(channel, queue, names=names, key=key)
    # Unbound, unconsumed and just found empty: nothing can reach it any more.
    await queue.delete(if_unused=False, if_empty=False)
    logger.info(
        "request queue %r of osrdyne 0.1 retired: %r took over, %d waiting request(s) moved",
        old,
        current.name,
        moved,
        extra=logs.fields(pool=names.pool, key=key),
    )
    return True


async def move_requests(
    channel: aio_pika.abc.AbstractChannel,
    queue: aio_pika.abc.AbstractQueue,
    *,
    names: PoolNames,
    key: str,
) -> int:
    """Republish every request waiting in `queue` to the request exchange with `key`, each
    acked only once the broker confirmed its copy. Returns how many were moved."""
    target = await channel.get_exchange(names.request_exchange, ensure=False)
    moved = 0
    while (message := await queue.get(no_ack=False, fail=False)) is not None:
        await target.publish(replies.copy_of(message), routing_key=key, mandatory=True)
        await message.ack()
        moved += 1
    return moved
