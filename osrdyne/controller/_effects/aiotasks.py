"""Named, guarded background tasks.

Every background task of the controller is started through `guarded`, so its failure is logged
the moment it happens instead of being noticed by nobody, and stopped through `stop_all`, which
cancels, waits a bounded time and reports stragglers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

logger = logging.getLogger(__name__)


def guarded(
    coro: Coroutine[Any, Any, Any],
    *,
    name: str,
    on_death: asyncio.Event | None = None,
) -> asyncio.Task[Any]:
    """Start `coro` as a task named `name` whose unexpected end is logged.

    A background loop is meant to run until cancelled: returning or raising is unexpected.
    `on_death`, when given, is set so the owner can react (e.g. end a controller session).
    """
    task = asyncio.create_task(coro, name=name)

    def report(done: asyncio.Task[Any]) -> None:
        if done.cancelled():
            return
        exc = done.exception()
        if exc is not None:
            logger.error("task %r died", name, exc_info=exc)
        else:
            logger.warning("task %r ended unexpectedly", name)
        if on_death is not None:
            on_death.set()

    task.add_done_callback(report)
    return task


async def stop_all(tasks: Iterable[asyncio.Task[Any]], *, timeout: float = 5.0) -> None:
    """Cancel `tasks` and wait up to `timeout` for them; log the ones that did not stop."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return
    _, stragglers = await asyncio.wait(pending, timeout=timeout)
    for task in stragglers:
        logger.warning("task %r did not stop within %.1fs", task.get_name(), timeout)
