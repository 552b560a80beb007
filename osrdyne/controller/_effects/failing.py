"""Failing groups answer their callers at once, with the reason, instead of at their deadline.

A group whose workers keep failing to start (`breaker`: `groups.failing_after` failed starts
within `groups.failing_window`) is failing. While it is, the controller consumes its request
queue itself, at a lower consumer priority than workers (`x-priority` -1: a worker that
consumes gets the requests first), and answers each request `start_failed` with the last
reason: those waiting when it became failing, and each new one as it arrives. The driver keeps
restarting the workers with its own back-off; the first one that serves (`ready`,
`request-received`) closes the breaker and the controller's consumer goes. One log line when
a group becomes failing, one when it stops.

Failed starts come from the activity processor (`start-failed` reports) and from the driver's
view of its workers (`drivers.base.Describes`: exits), read every `_OBSERVE_INTERVAL` seconds
and judged `_EXIT_SETTLE` seconds after they were seen (a worker's `ready` may still be on
its way: an exit after it is a crash, not a failed start).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

import aio_pika
import aio_pika.abc
import aio_pika.exceptions

from drivers import base
from osrdyne import wire
from osrdyne.controller._decisions.breaker import Breakers, Change, Failing
from osrdyne.controller._decisions.history import EventKind, KeyHistory
from osrdyne.controller._effects import replies
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics

logger = logging.getLogger(__name__)

#: Seconds between two readings of the driver's workers (no I/O: what it last saw).
_OBSERVE_INTERVAL = 0.5
#: Seconds an exit seen in the driver's view waits before it is judged (`breaker`): the
#: `ready` a worker sent before it crashed on a request travels through the broker and the
#: activity queue, its exit is polled from the driver; judged at once, a worker that served
#: and then crashed would be taken for one that cannot start.
_EXIT_SETTLE = 2.0
#: Consumer priority of the controller on a failing group's queue (workers have 0).
_PRIORITY = -1
#: Requests of failing groups answered at once.
_PREFETCH = 64

#: Whether the request-queue loop last saw the queue of a key.
QueueExists = Callable[[str], bool]


class FailingGroups:
    """The breakers of a session's groups and the consumers that answer for failing ones."""

    def __init__(
        self,
        *,
        connection: aio_pika.abc.AbstractConnection,
        names: wire.PoolNames,
        publisher: wire.RenewingChannel,
        tracker: PoolStateTracker,
        driver: base.Driver,
        queue_exists: QueueExists,
        metrics: ControllerMetrics,
        threshold: int,
        window: float,
        history: KeyHistory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connection = connection
        self._names = names
        self._publisher = publisher
        self._tracker = tracker
        self._driver = driver
        self._queue_exists = queue_exists
        self._metrics = metrics
        self._history = history
        self._clock = clock
        self.breakers = Breakers(threshold=threshold, window=window, settle=_EXIT_SETTLE)
        self._channel: aio_pika.abc.AbstractChannel | None = None
        #: Consumer tags of the queues answered for, by key.
        self._consumers: dict[str, tuple[aio_pika.abc.AbstractQueue, str]] = {}
        self._changed = asyncio.Event()

    # -- what the breakers hear -----------------------------------------------------------

    def reported(self, key: str, worker_id: str | None, reason: object) -> None:
        """A worker's `start-failed` report (its reason is untrusted: cleaned here)."""
        cleaned = wire.clean_reason(reason) or "a worker failed to start (it gave no reason)"
        self._metrics.failed_starts.labels("report").inc()
        self._apply(
            self.breakers.failed_start(
                key, cleaned, now=self._clock(), wall=time.time(), worker_id=worker_id
            )
        )

    def served(self, key: str, worker_id: str | None, *, ready: bool = True) -> None:
        """A worker of `key` reported `ready` (`ready` True) or a request received."""
        self._apply(self.breakers.served(key, worker_id, ready=ready))

    def failing(self, key: str) -> Failing | None:
        return self.breakers.failing.get(key)

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Read the driver's workers, forget groups no longer expected, and consume the
        queues of failing groups (only those): at each change, and every half second."""
        try:
            while True:
                self._observe()
                await self._converge()
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_OBSERVE_INTERVAL):
                        await self._changed.wait()
        finally:
            self._consumers.clear()
            if self._channel is not None and not self._channel.is_closed:
                with contextlib.suppress(Exception):
                    await self._channel.close()

    def _observe(self) -> None:
        expected = self._tracker.state.value.groups
        for key in self.breakers.keep(expected):
            self._log_change(Change(key, False, "its group is no longer expected"))
        if isinstance(self._driver, base.Describes):
            try:
                described = self._driver.describe()
            except Exception:  # the status document logs a driver that cannot describe
                described = {}
            now, wall = self._clock(), time.time()
            changes = self.breakers.observe(described, expected=expected, now=now, wall=wall)
            for change in changes:
                self._metrics.failed_starts.labels("exit").inc()
                self._apply(change)
        self._metrics.groups_failing.set(len(self.breakers.failing))

    async def _converge(self) -> None:
        """Consume the queue of each failing group that has one; cancel the others."""
        failing = self.breakers.failing
        for key in [k for k in self._consumers if k not in failing]:
            queue, tag = self._consumers.pop(key)
            with contextlib.suppress(aio_pika.exceptions.AMQPError, RuntimeError):
                await queue.cancel(tag)
        for key in [k for k in self._consumers if not self._queue_exists(k)]:
            del self._consumers[key]  # its queue went (and the consumer with it): once back,
            # it is consumed again
        for key in [k for k in failing if k not in self._consumers and self._queue_exists(k)]:
            try:
                channel = await self._open_channel()
                queue = await channel.get_queue(self._names.request_queue(key), ensure=False)
                tag = await queue.consume(
                    functools.partial(self._answer, key), arguments={"x-priority": _PRIORITY}
                )
            except (aio_pika.exceptions.AMQPError, RuntimeError) as exc:
                # The queue went meanwhile (its channel closes with it): next pass.
                logger.info("cannot answer for failing group %r yet: %s", key, exc)
                continue
            self._consumers[key] = (queue, tag)

    async def _open_channel(self) -> aio_pika.abc.AbstractChannel:
        if self._channel is None or self._channel.is_closed:
            self._consumers.clear()  # they went with the channel
            self._channel = await self._connection.channel()
            await self._channel.set_qos(prefetch_count=_PREFETCH)
        return self._channel

    async def _answer(self, key: str, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        """Answer one request of a failing group `start_failed`, then ack it; a group that
        serves again meanwhile gets it back."""
        failing = self.breakers.failing.get(key)
        if failing is None:
            await message.nack(requeue=True)
            return
        document = {
            "error": f"the workers of key {key!r} fail to start: {failing.reason}",
            "reason": failing.reason,
            "key": key,
            "pool": self._names.pool,
            "failing_since": failing.since,
            "failed_starts": failing.failed_starts,
        }
        try:
            answered = await self._publisher.publish(
                lambda channel: replies.answer_error(
                    channel, message, status=wire.Status.START_FAILED, document=document
                )
            )
        except (aio_pika.exceptions.AMQPError, RuntimeError, ConnectionError) as exc:
            logger.warning("cannot answer a request of failing group %r: %s", key, exc)
            with contextlib.suppress(aio_pika.exceptions.AMQPError, RuntimeError):
                await message.nack(requeue=True)
            return
        await message.ack()
        self._metrics.start_failed_answers.labels("answered" if answered else "no_reply_to").inc()

    # -- changes --------------------------------------------------------------------------

    def _apply(self, change: Change) -> None:
        if change.failing is not None:
            self._log_change(change)
            self._changed.set()

    def _log_change(self, change: Change) -> None:
        fields = logs.fields(pool=self._names.pool, key=change.key)
        if change.failing:
            failing = self.breakers.failing[change.key]
            logger.warning(
                "worker group %r is failing (%d failed starts within %.0f s): %s; its "
                "requests are answered %s until a worker starts",
                change.key,
                failing.failed_starts,
                self.breakers.window,
                change.reason,
                wire.Status.START_FAILED.value,
                extra=fields,
            )
            if self._history is not None:
                self._history.record(change.key, EventKind.FAILING, str(change.reason))
        else:
            why = change.reason or "a worker serves"
            logger.info("worker group %r stops failing: %s", change.key, why, extra=fields)
            if self._history is not None:
                self._history.record(change.key, EventKind.SERVING_AGAIN, why)
        self._metrics.groups_failing.set(len(self.breakers.failing))
