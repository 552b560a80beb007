"""What the controller's three consumers (orphans, dead letters, activity) share: consume a
queue with a prefetch, handle each message in its own tracked task, give up on a message they
cannot handle after a bounded number of tries, and on stop cancel the consumer first and give
in-flight messages a grace period (whatever is abandoned stays unacked and is redelivered to
the next leader).

Giving up is the answer to a message that cannot be handled as it was sent (a handler raised
something other than a broker or connection failure), or that kept failing: the request is
answered `invalid_request` when it has a `reply_to`, kept in `P-poison` with the reason
either way, counted, and acked. No message goes back to its queue in a tight loop: a
transient failure is retried after a back-off, at most `MAX_ATTEMPTS` times.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

import aio_pika.abc
import aio_pika.exceptions

from osrdyne import wire
from osrdyne.controller._effects import poison_queue, replies
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Failures of one message before the consumer gives up on it.
MAX_ATTEMPTS = 3
#: Failures that are the broker's or the connection's, not the message's: worth a retry.
TRANSIENT = (
    aio_pika.exceptions.AMQPError,
    ConnectionError,
    TimeoutError,
)
#: Messages whose failures are remembered (a bound on what a flood of bad messages costs).
_REMEMBERED = 10_000


class QueueConsumer:
    #: Name of the queue consumed, for logs.
    queue_name: str = ""

    def __init__(
        self,
        channel: aio_pika.abc.AbstractChannel,
        *,
        prefetch: int,
        names: wire.PoolNames,
        metrics: ControllerMetrics,
        retry_delay: float = 1.0,
        publisher: wire.RenewingChannel | None = None,
    ) -> None:
        self.channel = channel
        #: Where answers, copies and poison go (confirmed; a channel the broker keeps
        #: refusing is replaced): the consuming channel when none is given.
        self.publisher = publisher
        self._prefetch = prefetch
        self._names = names
        self._metrics = metrics
        self._retry_delay = retry_delay
        self._in_flight: set[asyncio.Task[None]] = set()
        #: Publish-then-ack steps under way (`commit`): finished at stop, not cancelled
        #: halfway (a request published but not acked would be published again by the next
        #: leader).
        self._committing: set[asyncio.Future[Any]] = set()
        self._queue: aio_pika.abc.AbstractQueue | None = None
        self._tag: str | None = None
        #: Set by `stop()`: a message delivered after it (the broker had not taken the
        #: consumer's cancel yet) is left unacked, redelivered once the channel closes,
        #: instead of starting a handler nobody would wait for.
        self._stopping = False
        self._failures: collections.OrderedDict[str, int] = collections.OrderedDict()

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        raise NotImplementedError

    async def publish(
        self,
        send: Callable[[aio_pika.abc.AbstractChannel], Awaitable[T]],
        *,
        deadline: float | None = None,
    ) -> T:
        """`send(channel)` on the publisher: a refusal that passes is published again on a
        fresh channel, then after growing pauses, until `deadline` (`time.monotonic()`; None:
        the publisher's default), and then raised (`wire.RenewingChannel.publish`)."""
        if self.publisher is None:
            return await send(self.channel)
        return await self.publisher.publish(send, deadline=deadline)

    async def commit(self, steps: Awaitable[T]) -> T:
        """Run `steps` (a publish, then the ack of the message it carries on) to their end even
        when the handler is cancelled at stop: `stop` waits for them with a grace of their
        own. Before them, a cancelled handler leaves its message unacked and unpublished."""
        task = asyncio.ensure_future(steps)
        self._committing.add(task)
        task.add_done_callback(_committed)
        task.add_done_callback(self._committing.discard)
        return await asyncio.shield(task)

    async def start(self) -> None:
        await self.channel.set_qos(prefetch_count=self._prefetch)
        self._queue = await self.channel.get_queue(self.queue_name, ensure=False)
        self._tag = await self._queue.consume(self._on_message)

    async def _on_message(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        if self._stopping:
            return
        task = asyncio.create_task(self._guard(message), name=f"{self.queue_name} message")
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _guard(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        try:
            await self.handle(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._failed(message, exc)
        else:
            self._failures.pop(_fingerprint(message), None)

    async def _failed(self, message: aio_pika.abc.AbstractIncomingMessage, exc: Exception) -> None:
        if message.processed:
            logger.warning("%s: a message failed after its ack: %r", self.queue_name, exc)
            return
        if self.channel.is_closed:
            logger.warning(
                "%s: a message failed and its channel is closed: the broker redelivers it: %r",
                self.queue_name,
                exc,
            )
            return
        fingerprint = _fingerprint(message)
        attempts = self._failures.pop(fingerprint, 0) + 1
        reason = logs.redact(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, TRANSIENT) and attempts < MAX_ATTEMPTS:
            self._failures[fingerprint] = attempts
            while len(self._failures) > _REMEMBERED:
                self._failures.popitem(last=False)
            logger.warning(
                "%s: could not handle a message (%s, try %d of %d): requeued",
                self.queue_name,
                reason,
                attempts,
                MAX_ATTEMPTS,
            )
            await asyncio.sleep(self._retry_delay * attempts)
            await _quietly(message.nack(requeue=True))
            return
        logger.error(
            "%s: giving up on a message after %d tr%s: %s",
            self.queue_name,
            attempts,
            "y" if attempts == 1 else "ies",
            reason,
            exc_info=not isinstance(exc, TRANSIENT),
        )
        try:
            await self.give_up(message, reason=reason)
        except TRANSIENT:  # cannot even park it now: the next leader tries again
            logger.warning("%s: could not park a message; requeued", self.queue_name)
            await _quietly(message.nack(requeue=True))

    async def give_up(self, message: aio_pika.abc.AbstractIncomingMessage, *, reason: str) -> None:
        """Answer `invalid_request` (when it has a `reply_to`), keep it in the poison queue,
        count it, and ack it."""
        key = wire.text(message.routing_key) or ""
        # Parked first, answered next, acked last: a failure in between leaves it unacked.
        entry = await self.publish(
            lambda channel: poison_queue.park(
                channel, message, names=self._names, reason=reason, taken_from=self.queue_name
            )
        )
        await self.publish(
            lambda channel: replies.answer_error(
                channel,
                message,
                status=wire.Status.INVALID_REQUEST,
                document={
                    "error": f"the controller could not handle this request: {reason}",
                    "reason": "unprocessable",
                    "key": key,
                    "pool": self._names.pool,
                },
            )
        )
        self._metrics.unprocessable.labels(self.queue_name_kind).inc()
        logger.warning(
            "%s: message kept in %s as %s",
            self.queue_name,
            self._names.poison_queue,
            entry,
            extra=logs.fields(
                pool=self._names.pool, key=key, correlation_id=message.correlation_id
            ),
        )
        await message.ack()

    @property
    def queue_name_kind(self) -> str:
        """The queue's role in the pool (`orphan`, `dl`, `activity`), a metric label."""
        prefix = f"{self._names.pool}-"
        return self.queue_name[len(prefix) :] if self.queue_name.startswith(prefix) else "?"

    async def stop(self, grace: float) -> None:
        """Cancel the consumer, give in-flight messages `grace` seconds, cancel the rest, then
        give the publish-then-ack steps already under way (`commit`) `grace` more; at most
        about three times `grace` in all, even when the broker does not answer."""
        self._stopping = True
        if self._queue is not None and self._tag is not None and not self.channel.is_closed:
            try:
                async with asyncio.timeout(grace):
                    await _quietly(self._queue.cancel(self._tag))
            except TimeoutError:
                logger.warning(
                    "%s: the broker did not confirm the consumer's cancel", self.queue_name
                )
        abandoned = await _finish_or_cancel(self._in_flight, grace)
        if abandoned:
            logger.warning(
                "%s: %d message(s) abandoned at stop, to be redelivered",
                self.queue_name,
                abandoned,
            )
        unfinished = await _finish_or_cancel(self._committing, grace)
        if unfinished:
            logger.warning(
                "%s: %d message(s) published but not acked at stop: the next leader "
                "publishes them again",
                self.queue_name,
                unfinished,
            )


async def _finish_or_cancel(tasks: Collection[asyncio.Future[Any]], grace: float) -> int:
    """Give `tasks` `grace` seconds to end, cancel the rest; how many were cancelled."""
    if not tasks:
        return 0
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    return len(pending)


def _fingerprint(message: aio_pika.abc.AbstractIncomingMessage) -> str:
    """Who a message is across redeliveries (its delivery tag changes each time)."""
    digest = hashlib.blake2b(message.body, digest_size=16)
    for part in (message.routing_key, message.correlation_id, message.message_id):
        digest.update(b"\0" + (part or "").encode(errors="surrogateescape"))
    return digest.hexdigest()


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        logger.debug("ignored failure during cleanup", exc_info=True)


def _committed(task: asyncio.Future[Any]) -> None:
    """Retrieve a commit's outcome: its handler may have been cancelled and gone (its
    failure is then the broker redelivering the message, nothing to log twice)."""
    if not task.cancelled():
        task.exception()
