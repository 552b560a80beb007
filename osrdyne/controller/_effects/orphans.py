"""The orphan processor: requests nobody's queue took, turned into started worker groups.

A request whose key has no bound queue is routed by the request exchange's alternate exchange
to the orphan queue. For each, the processor requires the group (getting the tracker
generation from which it is Active), waits until the request-queue loop has reached that
generation with the key's queue bound, republishes the request unchanged to the request
exchange with publisher confirms, and only then acks it: a crash anywhere leaves it unacked,
so it is redelivered (at least once), never lost.

What is checked comes first, before anything acts on the request: the key passes the gate
that every new group passes (`gate`: a key that can never have a queue is answered
`invalid_key`; a new key beyond the group cap, the driver's capacity or the broker's limits
is answered `overloaded`), and protocol headers that are not what the protocol allows
(`wire.request_problem`) are answered `invalid_request`; neither starts a group. Such a
request without a `reply_to` is kept in the poison queue instead, so nothing vanishes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import aio_pika.abc

from osrdyne import wire
from osrdyne.controller._decisions.gate import Gate
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import poison_queue, replies
from osrdyne.controller._effects.consumer import QueueConsumer
from osrdyne.controller._effects.queue_loop import QueuesReached, RequestQueueLoop
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.ops import logs
from osrdyne.ops.metrics import ColdStartClock, ControllerMetrics

logger = logging.getLogger(__name__)

#: Seconds a forward may wait for its confirm before the key's queue is suspected of having
#: no leader (`RequestQueueLoop.suspect`): a queue with a leader confirms in milliseconds, in
#: a second or two while it elects one.
_SUSPECT_AFTER = 5.0


class OrphanProcessor(QueueConsumer):
    def __init__(
        self,
        channel: aio_pika.abc.AbstractChannel,
        *,
        names: wire.PoolNames,
        tracker: PoolStateTracker,
        queue_loop: RequestQueueLoop,
        metrics: ControllerMetrics,
        cold_starts: ColdStartClock,
        wait_timeout: float,
        prefetch: int,
        gate: Gate,
        publisher: wire.RenewingChannel | None = None,
    ) -> None:
        super().__init__(
            channel, prefetch=prefetch, names=names, metrics=metrics, publisher=publisher
        )
        self.queue_name = names.orphan_queue
        self._tracker = tracker
        self._queue_loop = queue_loop
        self._cold_starts = cold_starts
        self._wait_timeout = wait_timeout
        self._gate = gate

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        began = time.monotonic()
        key = message.routing_key or ""
        refusal = self._gate.admit(key)
        if refusal is not None:
            if refusal.status is wire.Status.INVALID_KEY:
                self._metrics.invalid_keys.inc()
            await self._refuse(
                message,
                key,
                refusal.status,
                refusal.error,
                reason=refusal.reason,
                details=refusal.details,
            )
            return
        problem = wire.request_problem(message.headers)
        if problem is not None:
            await self._refuse(message, key, wire.Status.INVALID_REQUEST, problem)
            return
        known = key in self._tracker.state.value.groups
        generation = self._tracker.require(key)
        fields = logs.fields(
            pool=self._names.pool,
            key=key,
            correlation_id=message.correlation_id,
            request_id=wire.request_id(message.message_id),
            generation=generation,
        )
        if not known:
            self._cold_starts.begin(key, began)
            logger.info("orphan for key %r: starting its worker group", key, extra=fields)

        def ready(reached: QueuesReached) -> bool:
            return (
                reached.generation >= generation and reached.actual.get(key) is GroupStatus.ACTIVE
            )

        try:
            async with asyncio.timeout(self._wait_timeout):
                await self._queue_loop.reached.wait_for(ready)
        except TimeoutError:
            logger.warning(
                "queue of %r not ready after %.0fs: orphan requeued",
                key,
                self._wait_timeout,
                extra=fields,
            )
            self._metrics.orphans.labels("requeued").inc()
            await message.nack(requeue=True)
            return
        copy = replies.copy_of(message)

        async def forward(channel: aio_pika.abc.AbstractChannel) -> None:
            exchange = await channel.get_exchange(self._names.request_exchange, ensure=False)
            # A forward the broker is slow to confirm has the queue loop look at whether the
            # key's queue has a leader (one RabbitMQ never elected takes no publish, ever).
            look = asyncio.get_running_loop().call_later(
                _SUSPECT_AFTER, self._queue_loop.suspect, key
            )
            try:
                await exchange.publish(copy, routing_key=key, mandatory=True)
            finally:
                look.cancel()

        # Refused while the key's queue elects a leader: published again, the same message
        # (its request id), until the caller's deadline.
        deadline = wire.deadline_from_header((message.headers or {}).get(wire.Header.DEADLINE))

        async def forward_and_ack() -> None:
            await self.publish(forward, deadline=deadline)
            self._metrics.orphans.labels("forwarded").inc()
            self._metrics.requests_routed.labels("orphan").inc()
            self._metrics.orphan_seconds.observe(time.monotonic() - began)
            logger.debug("orphan for key %r forwarded", key, extra=fields)
            # A queue created moments ago may come back empty from a broker crash though it
            # confirmed the forward (RabbitMQ 3.10): the orphan is kept until it is older.
            young = self._queue_loop.young_for(key)
            if young > 0:
                await asyncio.sleep(young)
            await message.ack()

        await self.commit(forward_and_ack())

    async def _refuse(
        self,
        message: aio_pika.abc.AbstractIncomingMessage,
        key: str,
        status: wire.Status,
        problem: str,
        *,
        reason: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        fields = logs.fields(
            pool=self._names.pool,
            key=key,
            correlation_id=message.correlation_id,
            request_id=wire.request_id(message.message_id),
        )
        logger.warning("refusing request for key %r (%s): %s", key, status, problem, extra=fields)
        self._metrics.orphans.labels(status.value).inc()
        if message.reply_to:
            await self.publish(
                lambda channel: replies.answer_error(
                    channel,
                    message,
                    status=status,
                    document={
                        "error": problem,
                        "reason": reason or status.value,
                        "key": key,
                        "pool": self._names.pool,
                        **(details or {}),
                    },
                )
            )
        else:
            entry = await self.publish(
                lambda channel: poison_queue.park(
                    channel, message, names=self._names, reason=problem, taken_from=self.queue_name
                )
            )
            logger.warning(
                "refused request for key %r had no reply_to: kept as poison %s",
                key,
                entry,
                extra=fields,
            )
        await message.ack()
