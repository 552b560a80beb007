"""The request queue, consumed: found once the controller made it, kept consumed, let go.

`RequestConsumer` waits for the queue (`consume`, retried with back-off, moving to the next
broker address when the queue stays missing on its node), keeps a consumer the broker lost
made again (`guard`), and cancels it on SIGTERM within a bound (`cancel`: False when the
worker is cut off from its broker, and must not wait to drain).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import cast

import aio_pika.abc
import aio_pika.exceptions
import aiormq
import tenacity

from osrdyne import wire
from worker_sdk import broker
from worker_sdk.settings import WorkerSettings

logger = logging.getLogger(__name__)

#: Longest wait for the broker to take the consumer's cancel on SIGTERM: a broker that has
#: not answered by then is taken as cut off (a live one answers in milliseconds).
_CANCEL_TIMEOUT = 3.0

#: The channel consuming the request queue, the queue, and the consumer tag.
Consuming = tuple[aio_pika.abc.AbstractChannel, aio_pika.abc.AbstractQueue, str]
OnMessage = Callable[[aio_pika.abc.AbstractIncomingMessage], Awaitable[None]]
Ready = Callable[[], Awaitable[None]]


async def open_channel(
    connection: aio_pika.abc.AbstractRobustConnection, settings: WorkerSettings
) -> aio_pika.abc.AbstractChannel:
    """A channel to consume the request queue on: confirmed, `concurrency` deliveries at a
    time."""
    channel = await connection.channel(publisher_confirms=True)
    await channel.set_qos(prefetch_count=settings.concurrency)
    return channel


class RequestConsumer:
    """Consumes a worker's request queue on `connection`, delivering to `on_message`."""

    def __init__(
        self,
        connection: aio_pika.abc.AbstractRobustConnection,
        settings: WorkerSettings,
        on_message: OnMessage,
    ) -> None:
        self._connection = connection
        self._settings = settings
        self._on_message = on_message
        #: The channel, queue and consumer tag serving requests, once consuming.
        self.consuming: Consuming | None = None
        #: How many times the consumer was made again (`guard`).
        self.restarts = 0

    async def consume(self, channel: aio_pika.abc.AbstractChannel, ready: Ready) -> Consuming:
        """Consume the request queue once the controller has created it, on `channel` or,
        if that was closed under an attempt, on a new one: the channel, the queue and the
        consumer tag. `ready` is awaited once the queue exists, before the consumer attaches.

        Retried with back-off: the queue may not exist yet (a failed passive declare closes
        its channel, so existence is checked on a spare one), and RabbitMQ before 4.1 drops
        the whole connection (541 INTERNAL_ERROR, `{badmatch,{error,noproc}}`,
        rabbitmq-server#13625) when a consumer attaches to a quorum queue whose Raft member is
        not running yet, e.g. right after the queue was declared; the robust connection comes
        back and the next attempt succeeds. Until it is back, an attempt meets a connection
        without transport (`RuntimeError`): retried as well (`broker.GONE`). The queue can
        also go between the check and the declare (the controller repairing a queue without
        a leader): the declare closes the channel with NOT_FOUND, and aio-pika's restore of
        it fails the same way and is never tried again (seen in CI): the next attempt takes
        a new channel.
        """
        connection = self._connection
        name = self._settings.requests_queue
        current = channel
        missing = _Missing(connection, name, self._settings.queue_missing_move_after)

        @tenacity.retry(
            retry=tenacity.retry_if_exception_type(broker.GONE),
            wait=tenacity.wait_exponential(multiplier=0.05, max=2),
            stop=tenacity.stop_after_delay(self._settings.queue_wait_timeout),
            before_sleep=tenacity.before_sleep_log(logger, logging.INFO),
            reraise=True,
        )
        async def attempt() -> Consuming:
            nonlocal current
            try:
                async with connection.channel() as spare:
                    await spare.declare_queue(name, passive=True)
            except aio_pika.exceptions.ChannelNotFoundEntity:
                await missing.seen()
                raise
            missing.since = None
            if current.is_closed:
                await broker.close_quietly(current)
                current = await open_channel(connection, self._settings)
            # Declared (passively) on the robust channel, so its consumer is restored after
            # a reconnect; a queue obtained by name only would silently stop being consumed.
            queue = await current.declare_queue(name, passive=True)
            await ready()
            return current, queue, await queue.consume(self._on_message)

        self.consuming = await attempt()
        return self.consuming

    async def guard(self, abort: Callable[[str], None]) -> None:
        """Keep the request queue consumed. aio-pika's robust channel restores the consumer
        after a reconnection or a cancel from the broker (the queue deleted, then made
        again), but when that restore itself fails (the queue missing at that moment: the
        channel closes with NOT_FOUND inside its close callback) nothing tries again, and the
        worker would live on without consuming. So: while the connection is up, a consumer
        the broker does not hold for `consumer_lost_after` seconds is made again on a new
        channel (the old one closed: what it had unacked is redelivered); if that fails, the
        worker ends itself (`abort`, with the reason) and its driver restarts it."""
        s = self._settings
        interval = min(1.0, s.consumer_lost_after / 4)
        lost_since: float | None = None
        while True:
            await asyncio.sleep(interval)
            if not self._connection.connected.is_set() or await self._held():
                lost_since = None  # reconnecting: the robust connection restores it
                continue
            now = time.monotonic()
            if lost_since is None:
                lost_since = now
            if now - lost_since < s.consumer_lost_after:
                continue
            logger.warning(
                "worker %s of key %r: the broker has held no consumer of %s for %.0f s while "
                "connected: consuming again on a new channel",
                s.id, s.key, s.requests_queue, now - lost_since,
            )  # fmt: skip
            try:
                await self._consume_again()
            except Exception as exc:
                abort(f"its consumer of {s.requests_queue} was lost and not made again: {exc}")
                return
            self.restarts += 1
            lost_since = None
            logger.info("worker %s of key %r consumes its queue again", s.id, s.key)

    async def _held(self) -> bool:
        """Whether the channel consuming the request queue is open and holds its consumer
        (aiormq drops a tag on the broker's cancel and with its channel)."""
        assert self.consuming is not None
        channel, _, tag = self.consuming
        try:
            async with asyncio.timeout(1):
                # aiormq's channel: its `consumers` are the tags the broker holds.
                underlay = cast(aiormq.Channel, await channel.get_underlay_channel())
        except (TimeoutError, *broker.GONE):
            return False
        return not underlay.is_closed and tag in underlay.consumers

    async def _consume_again(self) -> None:
        """Close the consuming channel (what it had unacked is redelivered) and consume again:
        `consume` takes a new channel for a closed one."""
        assert self.consuming is not None
        closed = self.consuming[0]
        await broker.close_quietly(closed)

        async def already_ready() -> None:
            pass

        await self.consume(closed, already_ready)

    async def cancel(self) -> bool:
        """Stop the broker's deliveries on SIGTERM; False when the worker is cut off from its
        broker: the connection is down (reconnecting), or the broker did not take the cancel
        within `_CANCEL_TIMEOUT` (a silent node, a cut link: the connection is not known lost
        yet). Bounded: a robust channel would wait for a reconnection that may never come,
        and the worker would outlive its driver's `stop_timeout` (then be SIGKILLed)."""
        assert self.consuming is not None
        _, queue, tag = self.consuming
        if not self._connection.connected.is_set():
            logger.warning("stopping cut off from the broker (reconnecting)")
            return False
        try:
            async with asyncio.timeout(_CANCEL_TIMEOUT):
                await queue.cancel(tag)
        except (TimeoutError, *broker.GONE):  # a channel closed under it too
            logger.warning("stopping cut off from the broker: the cancel went unanswered")
            return False
        return True


class _Missing:
    """How long the request queue has been missing on the connection's node: past
    `move_after` seconds, the connection moves to its next address (`wire.move_on`). A node
    back from a freeze longer than the Erlang tick can keep its metadata partitioned from the
    others for good (RabbitMQ 3.10 heals nothing until it is restarted; docs/reliability.md):
    it answers, and does not see the queues the controller declared on the majority."""

    def __init__(
        self, connection: aio_pika.abc.AbstractRobustConnection, queue: str, move_after: float
    ) -> None:
        self.connection = connection
        self.queue = queue
        self.move_after = move_after
        #: When the queue was first found missing on this node (None: found, or not looked).
        self.since: float | None = None

    async def seen(self) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
        elif now - self.since >= self.move_after:
            reason = f"request queue {self.queue} not found there for {now - self.since:.0f} s"
            if await wire.move_on(self.connection, reason):
                self.since = None
