"""The dead-letter responder: every request that died gets an answer saying why.

Request queues dead-letter to the pool's dead-letter exchange when a request expires, is
rejected, overflows the queue or reaches the delivery limit. The responder answers each one
that has a `reply_to` with `x-status` = the death reason and a small JSON document; a request
that reached the delivery limit (it kept crashing or stalling workers) is also kept in the
poison queue with its properties and death history. It acks only once its publications are
confirmed; one without `reply_to` is logged, counted and acked, never left unacked. Each is
noted in its key's history (the console's page of the key shows the last few).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import aio_pika.abc

from osrdyne import wire
from osrdyne.controller._decisions.history import DeadLetter, KeyHistory
from osrdyne.controller._effects import poison_queue, replies
from osrdyne.controller._effects.consumer import QueueConsumer
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics

logger = logging.getLogger(__name__)

_EXPLANATIONS: dict[str, str] = {
    wire.Status.EXPIRED: "the request waited longer than its time to live",
    wire.Status.REJECTED: "a worker rejected the request without requeueing it",
    wire.Status.MAXLEN: "the request queue overflowed and dropped the request",
    wire.Status.DELIVERY_LIMIT: "the request was delivered too many times without an "
    "answer (it may crash or stall workers); kept in the poison queue",
}


class DeadLetterResponder(QueueConsumer):
    def __init__(
        self,
        channel: aio_pika.abc.AbstractChannel,
        *,
        names: wire.PoolNames,
        metrics: ControllerMetrics,
        prefetch: int = 64,
        history: KeyHistory | None = None,
        publisher: wire.RenewingChannel | None = None,
    ) -> None:
        super().__init__(
            channel, prefetch=prefetch, names=names, metrics=metrics, publisher=publisher
        )
        self.queue_name = names.dead_letter_queue
        self._history = history

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        death = wire.Death.of(message.headers, message.routing_key)
        reason, key = death.reason, death.key
        self._metrics.dead_letters.labels(reason).inc()
        fields = logs.fields(
            pool=self._names.pool,
            key=key,
            correlation_id=message.correlation_id,
            request_id=wire.request_id(message.message_id),
            reason=reason,
        )
        logger.info("request for key %r died: %s", key, reason, extra=fields)

        await self.commit(self._settle(message, death, fields))

    async def _settle(
        self,
        message: aio_pika.abc.AbstractIncomingMessage,
        death: wire.Death,
        fields: Mapping[str, Any],
    ) -> None:
        """Park (at the delivery limit), answer and ack a dead letter: one step under
        `commit`, since a stop between them would park and answer it twice."""
        reason, key = death.reason, death.key
        if reason == wire.Status.DELIVERY_LIMIT:
            await self.publish(
                lambda channel: poison_queue.park(
                    channel,
                    message,
                    names=self._names,
                    reason=wire.Status.DELIVERY_LIMIT.value,
                    taken_from=self.queue_name,
                )
            )
            self._metrics.poison.inc()
            logger.warning(
                "request for key %r reached the delivery limit: kept as poison",
                key,
                extra=fields,
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
        answered = await self.publish(
            lambda channel: replies.answer_error(channel, message, status=reason, document=document)
        )
        if self._history is not None:
            letter = DeadLetter(
                time=time.time(),
                reason=reason,
                correlation_id=message.correlation_id,
                deaths=death.count,
                answered=answered,
                request_id=wire.request_id(message.message_id),
            )
            self._history.dead_letter(key, letter)
        if not answered:
            self._metrics.dead_letters_unanswerable.inc()
            logger.warning(
                "dead-lettered request for key %r (%s) has no reply_to: nobody to answer",
                key,
                reason,
                extra=fields,
            )
        await message.ack()
