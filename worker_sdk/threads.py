"""How the worker runs its users' code: handlers and hooks.

Async callables are awaited; sync ones run in the handler thread pool (`concurrency` threads).
A thread whose await is cancelled (its time limit) cannot be interrupted: it is handed to the
watchdog, which ends the worker if it never returns (`watchdog`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from worker_sdk import watchdog


class HandlerThreads:
    """Calls a worker's handlers and hooks, sync ones in a pool of `size` threads."""

    def __init__(self, size: int, guard: watchdog.Watchdog) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=size, thread_name_prefix="handler"
        )
        self._guard = guard

    async def call(self, fn: Callable[..., Any], *args: Any, what: str = "") -> Any:
        """Await async callables; run sync ones in the thread pool. A thread whose await is
        cancelled (its time limit) goes on running: the watchdog keeps an eye on it."""
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        future = self._pool.submit(fn, *args)
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._guard.abandon(future, what or getattr(fn, "__name__", "handler"))
            raise
        if isinstance(result, Awaitable):
            return await result
        return result

    def shutdown(self) -> None:
        """Take no more calls; queued ones are cancelled, running threads are not waited for."""
        self._pool.shutdown(wait=False, cancel_futures=True)
