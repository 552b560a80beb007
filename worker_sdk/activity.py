"""Activity reports to the controller, rate-limited so a busy worker stays cheap.

The controller only needs to know that a group is alive and used, so `request-received` is
sent at most once per interval: immediately for the first request after a quiet period (the
controller may be about to unbind the queue), then once per interval while requests keep
coming or are in flight (a long request keeps its group alive), and once more when it goes
idle. Every report carries the worker's load figures (docs/protocol.md, "Load figures"):
requests finished, slot-seconds busy, requests in flight and its concurrency, all counted
since the worker started; the controller's group scaler sizes the group from them.
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
        concurrency: int = 1,
    ) -> None:
        self._channel = channel
        self._exchange_name = exchange
        self._key = key
        self._worker_id = worker_id
        self._interval = interval
        self._last_sent = float("-inf")
        self._pending = False
        self._in_flight = 0
        self._concurrency = concurrency
        #: Requests finished, and slot-seconds busy up to `_busy_at` (the load figures).
        self._handled = 0
        self._busy_seconds = 0.0
        self._busy_at = time.monotonic()
        #: The last report said requests were in flight: the next quiet tick says they ended.
        self._reported_busy = False
        self._sending: set[asyncio.Task[None]] = set()
        #: Reports actually published (tests and metrics read it).
        self.sent = 0

    async def emit(
        self, event: Event, *, reason: str | None = None, retry_for: float | None = None
    ) -> None:
        """Publish one report now (used for `started`, `ready` and `start-failed`, whose
        `reason` goes in `x-reason`, cleaned and bounded: `wire.clean_reason`), with the
        load figures (`x-handled`, `x-busy-seconds`, `x-in-flight`, `x-concurrency`);
        refused for a reason that passes, published again for `retry_for` seconds (None: the
        publisher's default)."""
        self._account()
        self._reported_busy = self._in_flight > 0
        headers: dict[str, str | int | float] = {
            Header.EVENT: event.value,
            Header.WORKER_ID: self._worker_id,
            Header.HANDLED: self._handled,
            Header.BUSY_SECONDS: round(self._busy_seconds, 6),
            Header.IN_FLIGHT: self._in_flight,
            Header.CONCURRENCY: self._concurrency,
        }
        cleaned = wire.clean_reason(reason)
        if cleaned is not None:
            headers[Header.REASON] = cleaned
        message = aio_pika.Message(b"", headers=dict(headers))

        async def publish(on: aio_pika.abc.AbstractChannel) -> None:
            exchange = await on.get_exchange(self._exchange_name, ensure=False)
            await exchange.publish(message, routing_key=self._key)

        deadline = None if retry_for is None else time.monotonic() + retry_for
        await self._channel.publish(publish, deadline=deadline)
        self._last_sent = time.monotonic()
        self.sent += 1

    def request_started(self) -> None:
        """A request arrived: report it now if the worker was quiet, else fold it."""
        self._account()
        self._in_flight += 1
        if time.monotonic() - self._last_sent >= self._interval:
            self._spawn()
        else:
            self._pending = True

    def request_finished(self) -> None:
        self._account()
        self._in_flight -= 1
        self._handled += 1

    def _account(self) -> None:
        """Add the slot-seconds busy since the last change of the requests in flight."""
        now = time.monotonic()
        self._busy_seconds += self._in_flight * (now - self._busy_at)
        self._busy_at = now

    async def loading(self) -> None:
        """Report `loading` once per interval until cancelled: the startup hooks run (a
        dataset, a model being loaded can take minutes), and the controller must not take
        the group for idle and stop it before it is ready."""
        while True:
            await asyncio.sleep(self._interval)
            await self._send_quietly(Event.LOADING)

    async def run(self) -> None:
        """Flush folded reports once per interval while there is activity, an interval after
        the last report (a request's own report included: two reports a few ms apart give
        the controller a busy share of one request over those ms)."""
        while True:
            due = self._last_sent + self._interval - time.monotonic()
            await asyncio.sleep(due if due > 0 else self._interval)
            if time.monotonic() - self._last_sent < self._interval:
                continue  # a report went out meanwhile: the next one an interval after it
            if self._pending or self._in_flight > 0 or self._reported_busy:
                self._spawn()

    def _spawn(self) -> None:
        self._pending = False
        self._last_sent = time.monotonic()
        task = asyncio.create_task(self._send_quietly(), name="activity-report")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_quietly(self, event: Event = Event.REQUEST_RECEIVED) -> None:
        try:
            # Tried again for one interval at most: the next report says the same.
            await self.emit(event, retry_for=self._interval)
        except Exception as exc:  # a lost report only shortens the group's life; never fail
            # a request. A broker's refusal is one line; anything else gets its traceback.
            refused = wire.is_refusal(exc)
            logger.warning("could not publish an activity report: %r", exc, exc_info=not refused)
