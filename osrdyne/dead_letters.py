"""The dead-letter responder: every request that died gets an answer saying why.

Request queues dead-letter to the pool's dead-letter exchange when a request expires, is
rejected, overflows the queue or reaches the delivery limit. The responder answers each one
that has a `reply_to` with `x-status` = the death reason and a small JSON document; a request
that reached the delivery limit (it kept crashing or stalling workers) is also kept in the
poison queue with its properties and death history. It acks only once its publications are
confirmed; one without `reply_to` is logged, counted and acked, never left unacked.
"""

from __future__ import annotations

import logging

import aio_pika.abc

from osrdyne import deaths, logs, poison, protocol, replies
from osrdyne.consumer import QueueConsumer
from osrdyne.metrics import ControllerMetrics

logger = logging.getLogger(__name__)

_EXPLANATIONS: dict[str, str] = {
    protocol.Status.EXPIRED: "the request waited longer than its time to live",
    protocol.Status.REJECTED: "a worker rejected the request without requeueing it",
    protocol.Status.MAXLEN: "the request queue overflowed and dropped the request",
    protocol.Status.DELIVERY_LIMIT: "the request was delivered too many times without an "
    "answer (it may crash or stall workers); kept in the poison queue",
}


class DeadLetterResponder(QueueConsumer):
    def __init__(
        self,
        channel: aio_pika.abc.AbstractChannel,
        *,
        names: protocol.PoolNames,
        metrics: ControllerMetrics,
        prefetch: int = 64,
    ) -> None:
        super().__init__(channel, prefetch=prefetch)
        self.queue_name = names.dead_letter_queue
        self._names = names
        self._metrics = metrics

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        death = deaths.Death.of(message.headers, message.routing_key)
        reason, key = death.reason, death.key
        self._metrics.dead_letters.labels(reason).inc()
        fields = logs.fields(
            pool=self._names.pool, key=key, correlation_id=message.correlation_id, reason=reason
        )
        logger.info("request for key %r died: %s", key, reason, extra=fields)
        if reason == protocol.Status.DELIVERY_LIMIT:
            kept = replies.copy_of(message)
            kept.headers = {**(kept.headers or {}), poison.POISON_ID: poison.new_id()}
            await self.channel.default_exchange.publish(
                kept, routing_key=self._names.poison_queue, mandatory=True
            )
            self._metrics.poison.inc()
            logger.warning(
                "request for key %r reached the delivery limit: kept as poison", key, extra=fields
            )
        document = {
            "error": _EXPLANATIONS.get(reason, f"the request died ({reason})"),
            "reason": reason,
            "key": key,
            "pool": self._names.pool,
            "queue": death.queue,
            "deaths": death.count,
            "died_at": death.time,
        }
        answered = await replies.answer_error(
            self.channel, message, status=reason, document=document
        )
        if not answered:
            self._metrics.dead_letters_unanswerable.inc()
            logger.warning(
                "dead-lettered request for key %r (%s) has no reply_to: nobody to answer",
                key,
                reason,
                extra=fields,
            )
        await message.ack()
