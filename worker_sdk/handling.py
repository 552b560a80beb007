"""One request, from its delivery to its ack: check, handle within its limit, reply, ack.

Each request is checked (its protocol headers must be what the protocol allows, else it is
answered `invalid_request`), handled under a time limit (`watchdog`), replied to (`replies`)
and only then acked. A reply that fails on a broker error gives the request back to its queue;
any other failure of ours rejects it (dead-lettered, answered `rejected`): a request never
holds a prefetch slot for good. The worker's hot path: no task, no timer of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aio_pika.abc

from osrdyne import wire
from osrdyne.wire import Header, Status, request_problem, text
from worker_sdk import activity, broker, errors, replies, request, threads, tracing, watchdog
from worker_sdk.metrics import WorkerMetrics
from worker_sdk.settings import WorkerSettings

logger = logging.getLogger(__name__)

#: How long a request whose reply failed waits before it is given back to its queue.
_GIVE_BACK_PAUSE = 0.5

Handler = Callable[[request.Request], Any]


class RequestHandler:
    """Handles the requests of one worker: `handle(message)` per delivery."""

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        handlers: dict[str | None, Handler],
        calls: threads.HandlerThreads,
        replier: replies.Replier,
        reporter: activity.ActivityReporter,
        stats: dict[str, int],
        metrics: WorkerMetrics | None,
    ) -> None:
        self._settings = settings
        self._handlers = handlers
        self._calls = calls
        self._replies = replier
        self._reporter = reporter
        self._stats = stats
        self._metrics = metrics

    def _count(self, outcome: str) -> None:
        self._stats[outcome] += 1
        if self._metrics is not None:
            self._metrics.requests.labels(outcome).inc()

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        self._reporter.request_started()
        try:
            problem = request_problem(message.headers)
            if problem is not None:
                await self._refuse(message, problem)
                return
            with tracing.handling(
                message.headers,
                key=self._settings.key,
                pool=self._settings.pool,
                path=text(message.headers.get(Header.RPC_PATH)) if message.headers else None,
            ):
                await self._handle_one(message)
        except broker.ERRORS:
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
                with contextlib.suppress(*broker.ERRORS):
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
        with contextlib.suppress(*broker.ERRORS):  # MessageProcessError is an AMQPError
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
            key=self._settings.key,
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
            status = exc.status or self._settings.error_status
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
                self._settings.error_status,
                f"{type(exc).__name__}: {exc}",
                path=req.path,
                details={"traceback": replies.traceback_tail(exc)},
            )
            await self._replies.send(message, body, status=self._settings.error_status)
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
        s = self._settings
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
            return await self._calls.call(handler, req, what=f"{req.path!r} ({req.correlation_id})")
        finally:
            if self._metrics is not None:
                self._metrics.handler_seconds.labels(req.path or "").observe(
                    time.monotonic() - began
                )

    def _fields(self, message: aio_pika.abc.AbstractIncomingMessage) -> dict[str, Any]:
        """`extra=` of a log line about a request (rendered by structured log set-ups)."""
        s = self._settings
        return {
            "pool": s.pool,
            "key": s.key,
            "worker_id": s.id,
            "correlation_id": message.correlation_id,
            "request_id": wire.request_id(message.message_id),
        }
