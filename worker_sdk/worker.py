"""The worker: consume a group's queue, run handlers, reply, ack, report activity.

Life of a worker: publish `started`, run the startup hooks (load what the key names), wait for
the request queue, consume it, publish `ready` (`startup`). A standby worker
(`WORKER_STANDBY_QUEUE`) first waits, connected, for the assignment naming its key
(`standby`), then lives the same life.

Each request is checked, handled under a time limit, replied to and only then acked
(`handling`). On SIGTERM it stops consuming (`consuming`), gives in-flight requests
`drain_timeout` to finish (`draining`), and closes; whatever was abandoned is requeued by the
broker and said in the log. A worker whose handler thread wedges ends itself (`Worker.abort`),
so its driver restarts it.

`Worker` only wires these pieces: registration, the run, the stages of a stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any, TypeVar

import aio_pika.abc
import aio_pika.exceptions

from osrdyne import wire
from osrdyne.ops import logs
from worker_sdk import (
    activity,
    broker,
    consuming,
    draining,
    handling,
    replies,
    standby,
    startup,
    threads,
    watchdog,
)
from worker_sdk.metrics import OUTCOMES, WorkerMetrics
from worker_sdk.settings import WorkerSettings

logger = logging.getLogger(__name__)

#: Longest wait to close the connection of a worker cut off from its broker.
_CUT_OFF_CLOSE_TIMEOUT = 1.0

Hook = Callable[["Worker"], Any]
F = TypeVar("F", bound=Callable[..., Any])


class Worker:
    """A keyed worker. Register handlers, then `run()` (or `await serve(stop)`)."""

    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self.settings = settings if settings is not None else WorkerSettings.from_environment()
        #: Whatever startup hooks load for the key (a dataset, a model...): free for users.
        self.state: dict[str, Any] = {}
        self._handlers: dict[str | None, handling.Handler] = {}
        self._standby: list[Hook] = []
        self._startup: list[Hook] = []
        self._shutdown: list[Hook] = []
        #: Counters of what this worker did (handled ok, failed, requeued, expired).
        self.stats: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        #: The same counts and handler latency, for Prometheus; only with
        #: `WORKER_METRICS_PORT` set (prometheus-client is not even imported without it).
        self.metrics = WorkerMetrics() if self.settings.metrics_port is not None else None
        #: Why this worker ended itself (`abort`), None while it serves.
        self.aborted: str | None = None
        self._abort = asyncio.Event()
        self._watchdog = watchdog.Watchdog(grace=self.settings.stall_grace, on_wedged=self.abort)
        self._threads = threads.HandlerThreads(self.settings.concurrency, self._watchdog)
        # The pieces made as `serve` goes (tests read them).
        self._replier: replies.Replier | None = None
        self._reporter: activity.ActivityReporter | None = None
        self._in_flight: draining.InFlight | None = None
        self._consumer: consuming.RequestConsumer | None = None

    @property
    def consumer_restarts(self) -> int:
        """How many times the consumer of the request queue was made again (the broker had
        lost it while connected: `consuming.RequestConsumer.guard`)."""
        return self._consumer.restarts if self._consumer is not None else 0

    # -- registration ---------------------------------------------------------------------

    def handler(self, path: str | None = None) -> Callable[[F], F]:
        """Register a handler for requests whose `x-rpc-path` is `path` (None: the default)."""

        def register(fn: F) -> F:
            if path in self._handlers:
                raise ValueError(f"a handler for path {path!r} is already registered")
            self._handlers[path] = fn
            return fn

        return register

    def on_standby(self, fn: F) -> F:
        """Run `fn(worker)` on a standby worker before it is offered keys (it waits for its
        assignment only once these are done): prepare what does not depend on the key (start
        an engine, open a session), so that a new key pays only for what it names. A worker
        started for its key does not run them (sync hooks run in a thread)."""
        self._standby.append(fn)
        return fn

    def on_startup(self, fn: F) -> F:
        """Run `fn(worker)` before consuming (sync hooks run in a thread)."""
        self._startup.append(fn)
        return fn

    def on_shutdown(self, fn: F) -> F:
        """Run `fn(worker)` after the last request was handled."""
        self._shutdown.append(fn)
        return fn

    # -- running --------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then drain. The entry point of a worker process.

        Logs go through the controller's own set-up (`osrdyne.ops.logs`: plain lines, or JSON
        with `WORKER_LOG_JSON`), so a worker's lines and its controller's read alike."""
        logs.configure(level=self.settings.log_level, json_format=self.settings.log_json)

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await self.serve(stop)

        asyncio.run(main())
        if self.aborted is not None or self._watchdog.running():
            # A handler thread still running (wedged, or abandoned by a stop) would keep the
            # interpreter from exiting (it joins them): leave now.
            logging.shutdown()
            os._exit(watchdog.EXIT_WEDGED if self.aborted is not None else 0)

    def abort(self, reason: str) -> None:
        """End this worker now, without draining: it cannot serve any more (a wedged handler,
        a lost engine it depends on). `run()` then exits with `watchdog.EXIT_WEDGED`, and the
        driver restarts the process; unacked requests go back to the queue."""
        if self.aborted is None:
            logger.critical(
                "worker %s of key %r ends itself: %s", self.settings.id, self.settings.key, reason
            )
            self.aborted = reason
        self._abort.set()

    async def serve(self, stop: asyncio.Event) -> None:
        """Serve requests until `stop` is set, then drain in-flight work and close."""
        s = self.settings
        if self.metrics is not None and s.metrics_port is not None:
            try:
                self.metrics.serve(s.metrics_port)
            except OSError as exc:  # e.g. the port is taken by a sibling worker: serve anyway
                logger.warning("cannot serve metrics on port %d: %s", s.metrics_port, exc)
        connection = await wire.connect_robust(
            s.amqp_uri, name=f"worker {s.id} ({s.pool})", reconnect_interval=1
        )
        #: Stopping without a broker to answer: nothing to drain into, a short close.
        cut_off = False
        #: A standby worker's standby channel, closing once it has its key.
        standby_closing: asyncio.Future[None] | None = None
        try:
            channel = await consuming.open_channel(connection, s)
            # Confirmed publishes (activity, replies to named queues) on a channel of their
            # own, replaced if the broker keeps refusing it (`wire.RenewingChannel`).
            publisher = wire.RenewingChannel(connection, name=f"worker {s.id}")
            replier = self._replier = replies.Replier(
                s, confirmed=publisher, fast=await connection.channel(publisher_confirms=False)
            )
            if s.standby_queue is not None:
                for hook in self._standby:
                    await self._threads.call(hook, self)
                standby_closing = await standby.await_key(connection, s, stop)
                if standby_closing is None:
                    return  # stopped while on standby
            drained = await self._serve_key(connection, channel, publisher, replier, stop)
            if drained is None:
                return  # stopped while starting, or aborted: no drain, no shutdown hook
            cut_off = not drained
            for hook in self._shutdown:
                await self._threads.call(hook, self)
        finally:
            try:
                async with asyncio.timeout(
                    _CUT_OFF_CLOSE_TIMEOUT if cut_off else broker.STEP_TIMEOUT
                ):
                    if standby_closing is not None:
                        await standby_closing
                    await connection.close()
            except (TimeoutError, aio_pika.exceptions.AMQPError, ConnectionError):
                logger.warning("could not close the connection cleanly (broker unreachable?)")
            self._threads.shutdown()
            if self.metrics is not None:
                await asyncio.to_thread(self.metrics.close)

    async def _serve_key(
        self,
        connection: aio_pika.abc.AbstractRobustConnection,
        channel: aio_pika.abc.AbstractChannel,
        publisher: wire.RenewingChannel,
        replier: replies.Replier,
        stop: asyncio.Event,
    ) -> bool | None:
        """Start for the key, serve its requests until `stop` (or an abort), then stop in
        stages: whether the requests in flight were drained (False: the stop found the worker
        cut off from its broker, and abandoned them), None when it stopped while starting or
        ended itself (`abort`: nothing drained, the broker redelivers what was unacked)."""
        s = self.settings
        reporter = activity.ActivityReporter(
            publisher,
            exchange=s.activity_exchange,
            key=s.key,
            worker_id=s.id,
            interval=s.activity_interval,
            concurrency=s.concurrency,
        )
        self._reporter = reporter
        requests = handling.RequestHandler(
            s,
            handlers=self._handlers,
            calls=self._threads,
            replier=replier,
            reporter=reporter,
            stats=self.stats,
            metrics=self.metrics,
        )
        in_flight = self._in_flight = draining.InFlight(requests.handle)
        consumer = self._consumer = consuming.RequestConsumer(connection, s, in_flight.on_message)

        async def start_up(ready: startup.Ready) -> consuming.Consuming:
            for hook in self._startup:
                await self._threads.call(hook, self)
            return await consumer.consume(channel, ready)

        if await startup.start(reporter, s, stop, start_up) is None:
            logger.info("stopped while starting: no request taken")
            return None
        heartbeat = asyncio.create_task(reporter.run(), name="activity-heartbeat")
        guard = asyncio.create_task(self._watchdog.run(), name="watchdog")
        consumer_guard = asyncio.create_task(consumer.guard(self.abort), name="consumer-guard")
        await _first_of(stop, self._abort)
        guard.cancel()
        consumer_guard.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer_guard
        if self.aborted is not None:
            heartbeat.cancel()
            return None  # no drain: the connection closes, unacked requests are redelivered
        logger.info("stopping: no new requests, draining %d in flight", len(in_flight))
        cut_off = not await consumer.cancel()
        if cut_off:
            in_flight.abandon()
        else:
            await in_flight.drain(s.drain_timeout)
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
        return not cut_off


async def _first_of(*events: asyncio.Event) -> None:
    """Wait until one of `events` is set."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
