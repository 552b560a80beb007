"""The orphan processor: requests nobody's queue took, turned into started worker groups.

A request whose key has no bound queue is routed by the request exchange's alternate exchange
to the orphan queue. For each, the processor requires the group (getting the tracker
generation from which it is Active), waits until the request-queue loop has reached that
generation with the key's queue bound, republishes the request unchanged to the request
exchange with publisher confirms, and only then acks it: a crash anywhere leaves it unacked,
so it is redelivered (at least once), never lost. A key that can never have a queue is
answered `invalid_key` instead of looping.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aio_pika.abc

from osrdyne import logs, protocol, replies
from osrdyne.consumer import QueueConsumer
from osrdyne.metrics import ColdStartClock, ControllerMetrics
from osrdyne.queue_loop import QueuesReached, RequestQueueLoop
from osrdyne.state import GroupStatus, PoolStateTracker

logger = logging.getLogger(__name__)


class OrphanProcessor(QueueConsumer):
    def __init__(
        self,
        channel: aio_pika.abc.AbstractChannel,
        *,
        names: protocol.PoolNames,
        tracker: PoolStateTracker,
        queue_loop: RequestQueueLoop,
        metrics: ControllerMetrics,
        cold_starts: ColdStartClock,
        wait_timeout: float,
        prefetch: int,
    ) -> None:
        super().__init__(channel, prefetch=prefetch)
        self.queue_name = names.orphan_queue
        self._names = names
        self._tracker = tracker
        self._queue_loop = queue_loop
        self._metrics = metrics
        self._cold_starts = cold_starts
        self._wait_timeout = wait_timeout
        self._exchange: aio_pika.abc.AbstractExchange | None = None

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        began = time.monotonic()
        key = message.routing_key or ""
        problem = protocol.key_problem(self._names, key)
        if problem is not None:
            await self._refuse(message, key, problem)
            return
        known = key in self._tracker.state.value.groups
        generation = self._tracker.require(key)
        fields = logs.fields(
            pool=self._names.pool,
            key=key,
            correlation_id=message.correlation_id,
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
        if self._exchange is None:
            self._exchange = await self.channel.get_exchange(
                self._names.request_exchange, ensure=False
            )
        await self._exchange.publish(replies.copy_of(message), routing_key=key, mandatory=True)
        await message.ack()
        self._metrics.orphans.labels("forwarded").inc()
        self._metrics.requests_routed.labels("orphan").inc()
        self._metrics.orphan_seconds.observe(time.monotonic() - began)
        logger.debug("orphan for key %r forwarded", key, extra=fields)

    async def _refuse(
        self, message: aio_pika.abc.AbstractIncomingMessage, key: str, problem: str
    ) -> None:
        fields = logs.fields(pool=self._names.pool, key=key, correlation_id=message.correlation_id)
        logger.warning("refusing request for invalid key %r: %s", key, problem, extra=fields)
        answered = await replies.answer_error(
            self.channel,
            message,
            status=protocol.Status.INVALID_KEY,
            document={"error": problem, "key": key, "pool": self._names.pool},
        )
        if not answered:
            logger.warning("request for invalid key %r had no reply_to: dropped", key, extra=fields)
        self._metrics.invalid_keys.inc()
        self._metrics.orphans.labels("invalid_key").inc()
        await message.ack()
