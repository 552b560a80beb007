"""Activity reports to the controller, rate-limited so a busy worker stays cheap.

The controller only needs to know that a group is alive and used, so `request-received` is
sent at most once per interval: immediately for the first request after a quiet period (the
controller may be about to unbind the queue), then once per interval while requests keep
coming or are in flight (a long request keeps its group alive).
"""

from __future__ import annotations

import asyncio
import logging
import time

import aio_pika
import aio_pika.abc

from osrdyne import wire
from osrdyne.wire import Event, Header

logger = logging.getLogger(__name__)


class ActivityReporter:
    def __init__(
        self,
        channel: wire.RenewingChannel,
        *,
        exchange: str,
        key: str,
        worker_id: str,
        interval: float,
    ) -> None:
        self._channel = channel
        self._exchange_name = exchange
        self._key = key
        self._worker_id = worker_id
        self._interval = interval
        self._last_sent = float("-inf")
        self._pending = False
        self._in_flight = 0
        self._sending: set[asyncio.Task[None]] = set()
        #: Reports actually published (tests and metrics read it).
        self.sent = 0

    async def emit(self, event: Event) -> None:
        """Publish one report now (used for `started` and `ready`)."""
        message = aio_pika.Message(
            b"", headers={Header.EVENT: event.value, Header.WORKER_ID: self._worker_id}
        )

        async def publish(on: aio_pika.abc.AbstractChannel) -> None:
            exchange = await on.get_exchange(self._exchange_name, ensure=False)
            await exchange.publish(message, routing_key=self._key)

        await self._channel.publish(publish)
        self._last_sent = time.monotonic()
        self.sent += 1

    def request_started(self) -> None:
        """A request arrived: report it now if the worker was quiet, else fold it."""
        self._in_flight += 1
        if time.monotonic() - self._last_sent >= self._interval:
            self._spawn()
        else:
            self._pending = True

    def request_finished(self) -> None:
        self._in_flight -= 1

    async def loading(self) -> None:
        """Report `loading` once per interval until cancelled: the startup hooks run (a
        dataset, a model being loaded can take minutes), and the controller must not take
        the group for idle and stop it before it is ready."""
        while True:
            await asyncio.sleep(self._interval)
            await self._send_quietly(Event.LOADING)

    async def run(self) -> None:
        """Flush folded reports once per interval while there is activity."""
        while True:
            await asyncio.sleep(self._interval)
            if self._pending or self._in_flight > 0:
                self._spawn()

    def _spawn(self) -> None:
        self._pending = False
        self._last_sent = time.monotonic()
        task = asyncio.create_task(self._send_quietly(), name="activity-report")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_quietly(self, event: Event = Event.REQUEST_RECEIVED) -> None:
        try:
            await self.emit(event)
        except Exception as exc:  # a lost report only shortens the group's life; never fail
            # a request. A broker's refusal is one line; anything else gets its traceback.
            refused = wire.is_refusal(exc)
            logger.warning("could not publish an activity report: %r", exc, exc_info=not refused)
