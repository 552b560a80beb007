"""The worker: consume a group's queue, run handlers, reply, ack, report activity.

Life of a worker: publish `started`, run the startup hooks (load what the key names), wait for
the request queue, consume it, publish `ready`. A standby worker (`WORKER_STANDBY_QUEUE`)
first waits, connected, for the assignment naming its key, then lives the same life.

Each request is checked (its protocol headers must be what the protocol allows, else it is
answered `invalid_request`), handled under a time limit (`watchdog`), replied to (`replies`)
and only then acked. On SIGTERM it stops consuming, gives in-flight requests `drain_timeout`
to finish, and closes; whatever was abandoned is requeued by the broker and said in the log.
A worker whose handler thread wedges ends itself (`Worker.abort`), so its driver restarts it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import aiormq
import tenacity

from osrdyne import wire
from osrdyne.ops import logs
from osrdyne.wire import Event, Header, Status, request_problem, text
from worker_sdk import activity, errors, replies, request, tracing, watchdog
from worker_sdk.metrics import OUTCOMES, WorkerMetrics
from worker_sdk.settings import WorkerSettings

logger = logging.getLogger(__name__)

#: Longest wait for one broker call while shutting down.
_BROKER_STEP_TIMEOUT = 5.0
#: Longest wait for the broker to take the consumer's cancel on SIGTERM: a broker that has
#: not answered by then is taken as cut off (a live one answers in milliseconds).
_CANCEL_TIMEOUT = 3.0
#: Longest wait to close the connection of a worker cut off from its broker.
_CUT_OFF_CLOSE_TIMEOUT = 1.0
#: Failures of the broker or the connection: what is unacked then is redelivered.
_BROKER_ERRORS = (
    aio_pika.exceptions.AMQPError,
    # A channel closed under a reply (its connection being restored): a RuntimeError in
    # aiormq, not an AMQPError. The request is given back to its queue (`_give_back`) and
    # delivered again; rejecting it would answer `rejected` for a request the worker had
    # handled (seen in the chaos run).
    aio_pika.exceptions.ChannelInvalidStateError,
    ConnectionError,
    TimeoutError,
)

#: How long a request whose reply failed waits before it is given back to its queue.
_GIVE_BACK_PAUSE = 0.5

#: What a broker call raises when the connection or channel under it is gone: AMQP errors,
#: socket errors, and `RuntimeError` from aio-pika/aiormq when a robust connection has no
#: open transport yet ("Connection was not opened", "<Connection ...> closed") or a channel
#: is closed (`ChannelInvalidStateError`). All are worth another attempt.
_BROKER_GONE = (aio_pika.exceptions.AMQPError, ConnectionError, RuntimeError)

Handler = Callable[[request.Request], Any]
#: The channel consuming the request queue, the queue, and the consumer tag.
_Consuming = tuple[aio_pika.abc.AbstractChannel, aio_pika.abc.AbstractQueue, str]
Hook = Callable[["Worker"], Any]
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Worker:
    """A keyed worker. Register handlers, then `run()` (or `await serve(stop)`)."""

    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self.settings = settings if settings is not None else WorkerSettings.from_environment()
        #: Whatever startup hooks load for the key (a dataset, a model...): free for users.
        self.state: dict[str, Any] = {}
        self._handlers: dict[str | None, Handler] = {}
        self._standby: list[Hook] = []
        self._startup: list[Hook] = []
        self._shutdown: list[Hook] = []
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.settings.concurrency, thread_name_prefix="handler"
        )
        self._in_flight: set[asyncio.Task[None]] = set()
        #: A standby worker's standby channel, closing once it has its key.
        self._standby_closing: asyncio.Future[None] | None = None
        self._reporter: activity.ActivityReporter | None = None
        self._replier: replies.Replier | None = None
        #: Counters of what this worker did (handled ok, failed, requeued, expired).
        self.stats: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        #: The same counts and handler latency, for Prometheus; only with
        #: `WORKER_METRICS_PORT` set (prometheus-client is not even imported without it).
        self.metrics = WorkerMetrics() if self.settings.metrics_port is not None else None
        #: Why this worker ended itself (`abort`), None while it serves.
        self.aborted: str | None = None
        self._abort = asyncio.Event()
        self._watchdog = watchdog.Watchdog(grace=self.settings.stall_grace, on_wedged=self.abort)
        #: The channel, queue and consumer tag serving requests, once consuming.
        self._consuming: _Consuming | None = None
        #: How many times the consumer was made again (`_guard_consumer`).
        self.consumer_restarts = 0

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
        try:
            channel = await self._request_channel(connection)
            # Confirmed publishes (activity, replies to named queues) on a channel of their
            # own, replaced if the broker keeps refusing it (`wire.RenewingChannel`).
            publisher = wire.RenewingChannel(connection, name=f"worker {s.id}")
            self._replier = replies.Replier(
                s, confirmed=publisher, fast=await connection.channel(publisher_confirms=False)
            )
            if s.standby_queue is not None:
                for hook in self._standby:
                    await self._call(hook, self)
                if not await self._await_key(connection, stop):
                    return  # stopped while on standby
            reporter = activity.ActivityReporter(
                publisher,
                exchange=s.activity_exchange,
                key=s.key,
                worker_id=s.id,
                interval=s.activity_interval,
                concurrency=s.concurrency,
            )
            self._reporter = reporter
            consuming = await self._start(connection, channel, reporter, stop)
            if consuming is None:
                logger.info("stopped while starting: no request taken")
                return
            self._consuming = consuming
            heartbeat = asyncio.create_task(reporter.run(), name="activity-heartbeat")
            guard = asyncio.create_task(self._watchdog.run(), name="watchdog")
            consumer_guard = asyncio.create_task(
                self._guard_consumer(connection), name="consumer-guard"
            )
            await _first_of(stop, self._abort)
            guard.cancel()
            consumer_guard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer_guard
            if self.aborted is not None:
                heartbeat.cancel()
                return  # no drain: the connection closes, unacked requests are redelivered
            logger.info("stopping: no new requests, draining %d in flight", len(self._in_flight))
            cut_off = not await self._cancel_consumer(connection)
            if cut_off:
                self._abandon()
            else:
                await self._drain()
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            for hook in self._shutdown:
                await self._call(hook, self)
        finally:
            try:
                async with asyncio.timeout(
                    _CUT_OFF_CLOSE_TIMEOUT if cut_off else _BROKER_STEP_TIMEOUT
                ):
                    if self._standby_closing is not None:
                        await self._standby_closing
                    await connection.close()
            except (TimeoutError, aio_pika.exceptions.AMQPError, ConnectionError):
                logger.warning("could not close the connection cleanly (broker unreachable?)")
            self._threads.shutdown(wait=False, cancel_futures=True)
            if self.metrics is not None:
                await asyncio.to_thread(self.metrics.close)

    async def _await_key(
        self, connection: aio_pika.abc.AbstractRobustConnection, stop: asyncio.Event
    ) -> bool:
        """Wait on the standby queue for the assignment naming this worker's key and request
        queue (docs/protocol.md); False when `stop` comes first. The queue is this worker's
        own (exclusive, auto-delete) and goes once the key is known (its channel closed), so
        a second assignment can never reach a worker that has one. An assignment that is
        not what the protocol says is refused and the wait goes on."""
        s = self.settings
        assert s.standby_queue is not None
        assigned: asyncio.Future[object] = asyncio.get_running_loop().create_future()

        async def on_assignment(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            found = wire.read_assignment(message.body, pool=s.pool)
            if isinstance(found, str) or assigned.done():
                logger.warning("worker %s refuses an assignment: %s", s.id, found)
                await message.reject(requeue=False)
                return
            await message.ack()
            assigned.set_result(found)

        channel = await connection.channel()
        stopped: asyncio.Future[object] = asyncio.ensure_future(stop.wait())
        try:
            await channel.set_qos(prefetch_count=1)
            queue = await channel.declare_queue(
                s.standby_queue,
                exclusive=True,
                auto_delete=True,
                arguments={"x-queue-type": "classic"},
            )
            await queue.consume(on_assignment)
            logger.info("worker %s of pool %r on standby", s.id, s.pool)
            await asyncio.wait([assigned, stopped], return_when=asyncio.FIRST_COMPLETED)
            if not assigned.done():
                return False
        finally:
            # Closing the channel cancels the consumer, and the auto-delete queue goes. With a
            # key, off the key's path: the assignment is acked, and until the queue is gone a
            # second one would be refused (`assigned` is done).
            stopped.cancel()
            closing = asyncio.ensure_future(_close_quietly(channel))
            if assigned.done():
                self._standby_closing = closing
            else:
                await closing
        found = assigned.result()
        assert isinstance(found, wire.Assignment)
        s.key, s.requests_queue = found
        logger.info("standby worker %s takes key %r", s.id, s.key)
        return True

    async def _start(
        self,
        connection: aio_pika.abc.AbstractRobustConnection,
        channel: aio_pika.abc.AbstractChannel,
        reporter: activity.ActivityReporter,
        stop: asyncio.Event,
    ) -> _Consuming | None:
        """Announce `started`, run the start-up hooks, announce `ready` and consume the
        request queue: the queue and consumer tag, or None when stopped while starting. A
        start-up that fails is reported (`start-failed`, with its reason) before its exception
        ends the process: its driver starts another, and callers hear why (docs/protocol.md).
        """
        s = self.settings
        # `started` is on its way while the startup hooks run and the consumer attaches
        # (its confirm is not on the first request's path); `ready` is published only
        # once it is confirmed, so the controller always hears them in that order.
        started = asyncio.create_task(self._announce(Event.STARTED), name="announce-started")
        logger.info("worker %s started for key %r of pool %r", s.id, s.key, s.pool)
        loading = asyncio.create_task(reporter.loading(), name="activity-loading")
        announced = False

        async def ready() -> None:
            # Confirmed before the consumer attaches: a request that kills this worker comes
            # after the controller could hear it served, and its exit is a crash, not a
            # failed start (docs/protocol.md).
            nonlocal announced
            if not announced:
                announced = True
                loading.cancel()
                await started
                await self._announce(Event.READY)

        try:
            # A stop while starting (a group stopped as its dataset loads) ends the start:
            # no request was taken yet, nothing to drain.
            return await _unless_set(stop, self._start_up(connection, channel, ready))
        except Exception as exc:
            loading.cancel()
            await started
            await self._announce(Event.START_FAILED, reason=start_failure_reason(exc))
            raise
        finally:
            loading.cancel()
            await started

    async def _start_up(
        self,
        connection: aio_pika.abc.AbstractRobustConnection,
        channel: aio_pika.abc.AbstractChannel,
        ready: Callable[[], Awaitable[None]],
    ) -> _Consuming:
        """Run the start-up hooks, then consume the request queue (`ready` once it exists)."""
        for hook in self._startup:
            await self._call(hook, self)
        return await self._consume(connection, channel, ready)

    async def _consume(
        self,
        connection: aio_pika.abc.AbstractRobustConnection,
        channel: aio_pika.abc.AbstractChannel,
        ready: Callable[[], Awaitable[None]],
    ) -> _Consuming:
        """Consume the request queue once the controller has created it, on `channel` or,
        if that was closed under an attempt, on a new one: the channel, the queue and the
        consumer tag. `ready` is awaited once the queue exists, before the consumer attaches.

        Retried with back-off: the queue may not exist yet (a failed passive declare closes
        its channel, so existence is checked on a spare one), and RabbitMQ before 4.1 drops
        the whole connection (541 INTERNAL_ERROR, `{badmatch,{error,noproc}}`,
        rabbitmq-server#13625) when a consumer attaches to a quorum queue whose Raft member is
        not running yet, e.g. right after the queue was declared; the robust connection comes
        back and the next attempt succeeds. Until it is back, an attempt meets a connection
        without transport (`RuntimeError`): retried as well (`_BROKER_GONE`). The queue can
        also go between the check and the declare (the controller repairing a queue without
        a leader): the declare closes the channel with NOT_FOUND, and aio-pika's restore of
        it fails the same way and is never tried again (seen in CI): the next attempt takes
        a new channel.
        """
        name = self.settings.requests_queue
        current = channel
        missing = _Missing(connection, name, self.settings.queue_missing_move_after)

        @tenacity.retry(
            retry=tenacity.retry_if_exception_type(_BROKER_GONE),
            wait=tenacity.wait_exponential(multiplier=0.05, max=2),
            stop=tenacity.stop_after_delay(self.settings.queue_wait_timeout),
            before_sleep=tenacity.before_sleep_log(logger, logging.INFO),
            reraise=True,
        )
        async def attempt() -> _Consuming:
            nonlocal current
            try:
                async with connection.channel() as spare:
                    await spare.declare_queue(name, passive=True)
            except aio_pika.exceptions.ChannelNotFoundEntity:
                await missing.seen()
                raise
            missing.since = None
            if current.is_closed:
                await _close_quietly(current)
                current = await self._request_channel(connection)
            # Declared (passively) on the robust channel, so its consumer is restored after
            # a reconnect; a queue obtained by name only would silently stop being consumed.
            queue = await current.declare_queue(name, passive=True)
            await ready()
            return current, queue, await queue.consume(self._on_message)

        return await attempt()

    async def _request_channel(
        self, connection: aio_pika.abc.AbstractRobustConnection
    ) -> aio_pika.abc.AbstractChannel:
        """A channel to consume the request queue on: confirmed, `concurrency` deliveries at
        a time."""
        channel = await connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=self.settings.concurrency)
        return channel

    async def _guard_consumer(self, connection: aio_pika.abc.AbstractRobustConnection) -> None:
        """Keep the request queue consumed. aio-pika's robust channel restores the consumer
        after a reconnection or a cancel from the broker (the queue deleted, then made
        again), but when that restore itself fails (the queue missing at that moment: the
        channel closes with NOT_FOUND inside its close callback) nothing tries again, and the
        worker would live on without consuming. So: while the connection is up, a consumer
        the broker does not hold for `consumer_lost_after` seconds is made again on a new
        channel (the old one closed: what it had unacked is redelivered); if that fails, the
        worker ends itself and its driver restarts it."""
        s = self.settings
        interval = min(1.0, s.consumer_lost_after / 4)
        lost_since: float | None = None
        while True:
            await asyncio.sleep(interval)
            if not connection.connected.is_set() or await self._consumer_held():
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
                await self._consume_again(connection)
            except Exception as exc:
                self.abort(f"its consumer of {s.requests_queue} was lost and not made again: {exc}")
                return
            self.consumer_restarts += 1
            lost_since = None
            logger.info("worker %s of key %r consumes its queue again", s.id, s.key)

    async def _consumer_held(self) -> bool:
        """Whether the channel consuming the request queue is open and holds its consumer
        (aiormq drops a tag on the broker's cancel and with its channel)."""
        assert self._consuming is not None
        channel, _, tag = self._consuming
        try:
            async with asyncio.timeout(1):
                # aiormq's channel: its `consumers` are the tags the broker holds.
                underlay = cast(aiormq.Channel, await channel.get_underlay_channel())
        except (TimeoutError, *_BROKER_GONE):
            return False
        return not underlay.is_closed and tag in underlay.consumers

    async def _consume_again(self, connection: aio_pika.abc.AbstractRobustConnection) -> None:
        """Close the consuming channel (what it had unacked is redelivered) and consume again:
        `_consume` takes a new channel for a closed one."""
        assert self._consuming is not None
        closed = self._consuming[0]
        await _close_quietly(closed)

        async def already_ready() -> None:
            pass

        self._consuming = await self._consume(connection, closed, already_ready)

    async def _announce(self, event: Event, *, reason: str | None = None) -> None:
        """Publish `started`, `ready` or `start-failed`, retried a few seconds while the
        connection comes back; a report that cannot be sent is logged, never fatal (the
        controller learns the group is alive from its next report, or counts the exit)."""
        assert self._reporter is not None
        try:
            async for attempt in tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception_type(_BROKER_GONE),
                wait=tenacity.wait_exponential(multiplier=0.05, max=1),
                stop=tenacity.stop_after_delay(_BROKER_STEP_TIMEOUT),
                reraise=True,
            ):
                with attempt:
                    await self._reporter.emit(event, reason=reason)
        except _BROKER_GONE as exc:
            logger.warning("could not report %r to the controller: %s", event.value, exc)

    async def _cancel_consumer(self, connection: aio_pika.abc.AbstractRobustConnection) -> bool:
        """Stop the broker's deliveries on SIGTERM; False when the worker is cut off from its
        broker: the connection is down (reconnecting), or the broker did not take the cancel
        within `_CANCEL_TIMEOUT` (a silent node, a cut link: the connection is not known lost
        yet). Bounded: a robust channel would wait for a reconnection that may never come,
        and the worker would outlive its driver's `stop_timeout` (then be SIGKILLed)."""
        assert self._consuming is not None
        _, queue, tag = self._consuming
        if not connection.connected.is_set():
            logger.warning("stopping cut off from the broker (reconnecting)")
            return False
        try:
            async with asyncio.timeout(_CANCEL_TIMEOUT):
                await queue.cancel(tag)
        except (TimeoutError, *_BROKER_GONE):  # a channel closed under it too
            logger.warning("stopping cut off from the broker: the cancel went unanswered")
            return False
        return True

    def _abandon(self) -> None:
        """Stop the requests in flight without their answers: a worker cut off from its broker
        can neither reply nor ack (acks belong to the channel the broker is losing), and the
        broker requeues whatever that channel held once it drops the connection (its
        heartbeat, or the socket closed as the process exits), for another worker to answer."""
        if self._in_flight:
            logger.warning(
                "%d request(s) in flight abandoned: the broker will redeliver them",
                len(self._in_flight),
            )
        for task in self._in_flight:
            task.cancel()

    async def _drain(self) -> None:
        if not self._in_flight:
            return
        done, pending = await asyncio.wait(self._in_flight, timeout=self.settings.drain_timeout)
        for task in pending:
            task.cancel()
        if pending:
            logger.warning(
                "drain timeout: %d request(s) abandoned, the broker will redeliver them",
                len(pending),
            )
            await asyncio.wait(pending, timeout=1)

    async def _on_message(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        # aiormq runs each delivery in a task of its own: track it for draining.
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            await self._handle(message)
        finally:
            self._in_flight.discard(task)

    def _count(self, outcome: str) -> None:
        self.stats[outcome] += 1
        if self.metrics is not None:
            self.metrics.requests.labels(outcome).inc()

    async def _handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        assert self._reporter is not None
        self._reporter.request_started()
        try:
            problem = request_problem(message.headers)
            if problem is not None:
                await self._refuse(message, problem)
                return
            with tracing.handling(
                message.headers,
                key=self.settings.key,
                pool=self.settings.pool,
                path=text(message.headers.get(Header.RPC_PATH)) if message.headers else None,
            ):
                await self._handle_one(message)
        except _BROKER_ERRORS:
            # Replying failed (a channel closed under the reply: its connection lost, or
            # being restored). The broker redelivers what a closed channel held; but on a
            # live channel (a connection restored with the request channel first and the
            # reply channel not yet), an unacked request is held for good, with a prefetch
            # slot: after `prefetch` of them the key got nothing more (a cluster test's key
            # unanswered for minutes). Given back after a pause, it is delivered again.
            logger.exception(
                "could not complete request %s: given back to the queue",
                message.correlation_id,
                extra=self._fields(message),
            )
            await self._give_back(message)
        except Exception:
            # A failure of ours outside the handler: never hold the request (and a slot)
            # forever. Rejected without requeue, it is dead-lettered and answered `rejected`.
            logger.exception(
                "request %s failed outside its handler: rejected",
                message.correlation_id,
                extra=self._fields(message),
            )
            if not message.processed:
                with contextlib.suppress(*_BROKER_ERRORS):
                    await message.reject(requeue=False)
        finally:
            self._reporter.request_finished()

    async def _give_back(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        """Requeue `message` after `_GIVE_BACK_PAUSE` (time for the channels to be restored):
        a closed channel's delivery cannot be, and needs not (the broker requeued it). Each
        redelivery counts against a quorum queue's delivery limit: a worker that can never
        reply does not hold a request for ever."""
        await asyncio.sleep(_GIVE_BACK_PAUSE)
        if message.processed:
            return
        with contextlib.suppress(*_BROKER_ERRORS):  # MessageProcessError is an AMQPError
            await message.nack(requeue=True)

    async def _refuse(self, message: aio_pika.abc.AbstractIncomingMessage, problem: str) -> None:
        """Answer a request whose protocol headers are not what the protocol allows."""
        self._count("invalid")
        logger.warning(
            "refusing request %s: %s", message.correlation_id, problem,
            extra=self._fields(message),
        )  # fmt: skip
        body = self._replies.error_body(Status.INVALID_REQUEST, problem)
        await self._replies.send(message, body, status=Status.INVALID_REQUEST)
        await message.ack()

    async def _handle_one(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        req = request.Request(
            message,
            key=self.settings.key,
            progress_sender=lambda body, ctype: self._replies.send(
                message, body, content_type=ctype, status=Status.PROGRESS, interim=True
            ),
            loop=asyncio.get_running_loop(),
        )
        left = req.time_left()
        if left is not None and left <= 0:
            self._count("expired")
            body = self._replies.error_body(
                Status.EXPIRED,
                "the caller's deadline passed before the work started",
                path=req.path,
            )
            await self._replies.send(message, body, status=Status.EXPIRED)
            await message.ack()
            return
        try:
            result = await self._within_limit(req)
        except errors.Requeue as exc:
            self._count("requeued")
            if exc.delay:
                await asyncio.sleep(exc.delay)
            await message.reject(requeue=True)
            return
        except errors.HandlerError as exc:
            self._count("stalled" if isinstance(exc, watchdog.Stalled) else "failed")
            status = exc.status or self.settings.error_status
            body = self._replies.error_body(status, exc.message, path=req.path, details=exc.details)
            await self._replies.send(message, body, status=status)
        except Exception as exc:
            self._count("failed")
            logger.exception(
                "handler failed on request %s",
                req.correlation_id,
                extra=self._fields(req.message),
            )
            body = self._replies.error_body(
                self.settings.error_status,
                f"{type(exc).__name__}: {exc}",
                path=req.path,
                details={"traceback": replies.traceback_tail(exc)},
            )
            await self._replies.send(message, body, status=self.settings.error_status)
        else:
            self._count("ok")
            extra = None
            if isinstance(result, request.Reply):
                data, content_type = result.encoded()
                extra = result.headers
            else:
                data, content_type = request.encode_body(result)
            await self._replies.send(
                message, data, content_type=content_type, status=Status.OK, extra=extra
            )
        await message.ack()

    async def _within_limit(self, req: request.Request) -> Any:
        """The handler's result, or `watchdog.Stalled` once it runs past its time limit: the
        worker's `handler_timeout`, or the caller's deadline plus `stall_grace` if sooner."""
        s = self.settings
        limit = watchdog.time_limit(
            handler_timeout=s.handler_timeout, stall_grace=s.stall_grace, time_left=req.time_left()
        )
        try:
            return await watchdog.within_limit(self._dispatch(req), limit)
        except watchdog.Stalled:
            logger.error(
                "handler of request %s ran past its %.3g s limit: answered, slot freed",
                req.correlation_id,
                limit,
                extra=self._fields(req.message),
            )
            raise

    async def _dispatch(self, req: request.Request) -> Any:
        handler = self._handlers.get(req.path)
        if handler is None:
            known = sorted(p for p in self._handlers if p is not None)
            raise errors.HandlerError(
                f"no handler for path {req.path!r}", details={"known_paths": known}
            )
        began = time.monotonic()
        try:
            return await self._call(handler, req, what=f"{req.path!r} ({req.correlation_id})")
        finally:
            if self.metrics is not None:
                self.metrics.handler_seconds.labels(req.path or "").observe(
                    time.monotonic() - began
                )

    async def _call(self, fn: Callable[..., Any], *args: Any, what: str = "") -> Any:
        """Await async callables; run sync ones in the handler thread pool. A thread whose
        await is cancelled (its time limit) goes on running: the watchdog keeps an eye on it."""
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        future = self._threads.submit(fn, *args)
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._watchdog.abandon(future, what or getattr(fn, "__name__", "handler"))
            raise
        if isinstance(result, Awaitable):
            return await result
        return result

    def _fields(self, message: aio_pika.abc.AbstractIncomingMessage) -> dict[str, Any]:
        """`extra=` of a log line about a request (rendered by structured log set-ups)."""
        s = self.settings
        return {
            "pool": s.pool,
            "key": s.key,
            "worker_id": s.id,
            "correlation_id": message.correlation_id,
            "request_id": wire.request_id(message.message_id),
        }

    @property
    def _replies(self) -> replies.Replier:
        """Sends this worker's replies (set once its channels are open)."""
        assert self._replier is not None
        return self._replier


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


async def _unless_set(stop: asyncio.Event, work: Awaitable[T]) -> T | None:
    """The result of `work`, or None when `stop` is set first (`work` is cancelled then)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait([task])
    return None if task.cancelled() else task.result()


def start_failure_reason(exc: BaseException) -> str:
    """What a worker reports of the exception that ended its start-up: its type and message
    on one line, masked and bounded (`wire.clean_reason`: no URL password, no `secret=...`,
    no control character, at most `wire.MAX_REASON_CHARS`)."""
    name = type(exc).__name__
    message = str(exc).strip()
    return wire.clean_reason(f"{name}: {message}" if message else name) or name


async def _first_of(*events: asyncio.Event) -> None:
    """Wait until one of `events` is set."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _close_quietly(channel: aio_pika.abc.AbstractChannel) -> None:
    """Close `channel`; a broker already gone has closed it."""
    with contextlib.suppress(*_BROKER_GONE):
        await channel.close()
