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
"""

from __future__ import annotations

import logging

import aio_pika.abc
import aio_pika.exceptions

from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import replies
from osrdyne.ops import logs
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)


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
