"""Broker events: what happens to the pool's queues, heard as it happens.

RabbitMQ's `rabbitmq_event_exchange` plugin publishes an event for every queue created or
deleted, binding added or removed, connection opened or closed... to the topic exchange
`amq.rabbitmq.event` (routing key = the event, properties in the headers). The controller
listens to queue deletions and binding removals: one of the pool's request queues deleted, or
unbound from the request exchange, by someone else than the request-queue loop (an operator,
a policy, a crashed node's cleanup) makes the loop declare or bind that queue again within a
second, without listing every queue (the cost of a repair does not grow with the pool's keys),
instead of at its next listing; a name it cannot place makes it list. While events are heard,
the full listing (anti-entropy, and the queue figures `/status` shows) runs every
`groups.listing_interval` instead of every `groups.loop_interval`.

Without the plugin the exchange does not exist: the controller says so once and relies on its
listings, as before. The events come from the broker, but their headers are still read as
hostile input (`wire.text`): only names of this vhost and this pool are acted on.
"""

from __future__ import annotations

import logging
import uuid

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import aiormq.exceptions

from osrdyne import wire
from osrdyne.controller._effects.queue_loop import RequestQueueLoop

logger = logging.getLogger(__name__)

EXCHANGE = "amq.rabbitmq.event"
#: The events listened to.
EVENTS = ("queue.deleted", "binding.deleted")


class BrokerEvents:
    """Consumes the broker's queue and binding events on a queue of its own (exclusive: it
    goes with the connection)."""

    def __init__(
        self,
        connection: aio_pika.abc.AbstractConnection,
        *,
        names: wire.PoolNames,
        vhost: str,
        queue_loop: RequestQueueLoop,
    ) -> None:
        self._connection = connection
        self._names = names
        self._vhost = vhost
        self._queue_loop = queue_loop
        #: Events read (tests and metrics read it).
        self.received = 0
        #: Whether the broker publishes events (None: not known yet).
        self.available: bool | None = None
        #: The channel the events arrive on, once listening.
        self.channel: aio_pika.abc.AbstractChannel | None = None

    async def start(self) -> None:
        """Listen, if the broker has the event exchange and lets this user read it; else
        say why once, and rely on the listings."""
        channel = await self._connection.channel()
        try:
            exchange = await channel.declare_exchange(EXCHANGE, passive=True)
            # In the pool's namespace (the controller's role may configure `P-*` only),
            # exclusive: it goes with the connection.
            queue = await channel.declare_queue(
                f"{self._names.pool}-events-{uuid.uuid4().hex[:12]}",
                exclusive=True,
                auto_delete=True,
            )
            for event in EVENTS:
                await queue.bind(exchange, routing_key=event)
            await queue.consume(self._on_event, no_ack=True)
        except (
            aio_pika.exceptions.ChannelNotFoundEntity,
            aiormq.exceptions.ChannelAccessRefused,
        ) as exc:
            self.available = False
            logger.warning(
                "no broker events (%s: is rabbitmq_event_exchange enabled, and may this user "
                "read %s?): queues deleted behind the controller's back are seen at its next "
                "listing",
                exc,
                EXCHANGE,
            )
            return
        self.available = True
        self.channel = channel
        self._queue_loop.events_heard = True
        channel.close_callbacks.add(self._closed)

    def _closed(self, *_: object) -> None:
        """The events' channel closed: nothing says what others change any more, so the
        queue loop lists every `loop_interval` again."""
        self._queue_loop.events_heard = False

    async def _on_event(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        self.received += 1
        headers = message.headers or {}
        if wire.text(headers.get("vhost")) != self._vhost:
            return
        deleted = message.routing_key == "queue.deleted"
        if deleted:
            name = wire.text(headers.get("name"))
        elif wire.text(headers.get("source_name")) == self._names.request_exchange:
            name = wire.text(headers.get("destination_name"))
        else:
            return
        if name and name.startswith(self._names.request_queue_prefix):
            self._queue_loop.queue_changed(name, deleted=deleted)
