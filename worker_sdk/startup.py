"""A worker's start, as the controller hears it: `started`, the start-up work, `ready`.

`started` is published as the start-up hooks run (the `loading` report once per interval
meanwhile: a dataset can take minutes), `ready` once the request queue exists and before the
consumer attaches; a start-up that fails is reported (`start-failed`, with its reason) before
its exception ends the process: its driver starts another, and callers hear why
(docs/protocol.md). A stop while starting ends the start: no request was taken yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import tenacity

from osrdyne import wire
from osrdyne.wire import Event
from worker_sdk import activity, broker
from worker_sdk.settings import WorkerSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")
#: Announces `ready` (once; later calls do nothing).
Ready = Callable[[], Awaitable[None]]


async def start(
    reporter: activity.ActivityReporter,
    settings: WorkerSettings,
    stop: asyncio.Event,
    work: Callable[[Ready], Awaitable[T]],
) -> T | None:
    """Announce `started`, run `work(ready)` (the start-up hooks, then consuming the request
    queue, calling `ready` once it exists) and return its result, or None when stopped while
    starting. A start-up that fails is reported (`start-failed`) and its exception raised."""
    s = settings
    # `started` is on its way while the startup hooks run and the consumer attaches
    # (its confirm is not on the first request's path); `ready` is published only
    # once it is confirmed, so the controller always hears them in that order.
    started = asyncio.create_task(announce(reporter, Event.STARTED), name="announce-started")
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
            await announce(reporter, Event.READY)

    try:
        # A stop while starting (a group stopped as its dataset loads) ends the start:
        # no request was taken yet, nothing to drain.
        return await _unless_set(stop, work(ready))
    except Exception as exc:
        loading.cancel()
        await started
        await announce(reporter, Event.START_FAILED, reason=start_failure_reason(exc))
        raise
    finally:
        loading.cancel()
        await started


async def announce(
    reporter: activity.ActivityReporter, event: Event, *, reason: str | None = None
) -> None:
    """Publish `started`, `ready` or `start-failed`, retried a few seconds while the
    connection comes back; a report that cannot be sent is logged, never fatal (the
    controller learns the group is alive from its next report, or counts the exit)."""
    try:
        async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(broker.GONE),
            wait=tenacity.wait_exponential(multiplier=0.05, max=1),
            stop=tenacity.stop_after_delay(broker.STEP_TIMEOUT),
            reraise=True,
        ):
            with attempt:
                await reporter.emit(event, reason=reason)
    except broker.GONE as exc:
        logger.warning("could not report %r to the controller: %s", event.value, exc)


def start_failure_reason(exc: BaseException) -> str:
    """What a worker reports of the exception that ended its start-up: its type and message
    on one line, masked and bounded (`wire.clean_reason`: no URL password, no `secret=...`,
    no control character, at most `wire.MAX_REASON_CHARS`)."""
    name = type(exc).__name__
    message = str(exc).strip()
    return wire.clean_reason(f"{name}: {message}" if message else name) or name


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
