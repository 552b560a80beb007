"""The watchdog: a handler cannot hold a worker forever.

Every handler runs under a time limit: the worker's `handler_timeout`, or the caller's
`x-deadline` plus `stall_grace` when that comes first. At the limit an async handler is
cancelled; a synchronous one cannot be (Python threads cannot be interrupted), so its thread
is *abandoned*: the request is answered (`worker_error`, reason `timeout`) and acked, and its
slot is given back. A thread that is still running `stall_grace` seconds later has wedged the
worker: the watchdog ends the process (after saying why), its driver restarts it, and no
activity report of a stalled request keeps its group alive meanwhile.

`time_limit` says what a request's limit is, `within_limit` awaits a handler under it and
raises `Stalled` at the limit, and `Watchdog` keeps the threads abandoned there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from worker_sdk import errors

logger = logging.getLogger(__name__)

#: Exit code of a worker the watchdog ended (EX_SOFTWARE).
EXIT_WEDGED = 70

T = TypeVar("T")


class Stalled(errors.HandlerError):
    """The handler ran past its time limit (answered for it)."""

    def __init__(self, limit: float) -> None:
        super().__init__(
            f"the handler ran past its time limit ({limit:.3g} s)",
            details={"reason": "timeout", "limit_s": round(limit, 3)},
        )


def time_limit(*, handler_timeout: float, stall_grace: float, time_left: float | None) -> float:
    """A request's limit: `handler_timeout`, or the caller's deadline (`time_left` from now)
    plus `stall_grace` if sooner."""
    if time_left is None:
        return handler_timeout
    return min(handler_timeout, time_left + stall_grace)


async def within_limit(work: Awaitable[T], limit: float) -> T:
    """`work`'s result, or `Stalled` once it runs `limit` seconds (a `TimeoutError` of the
    handler's own goes through as it is)."""
    scope = asyncio.timeout(limit)
    try:
        async with scope:
            return await work
    except TimeoutError:
        if not scope.expired():
            raise  # the handler's own
        raise Stalled(limit) from None


@dataclasses.dataclass
class _Abandoned:
    future: concurrent.futures.Future[object]
    what: str
    at: float


class Watchdog:
    """Keeps the handler threads abandoned at their limit, and acts if one never returns."""

    def __init__(
        self,
        *,
        grace: float,
        on_wedged: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._grace = grace
        self._on_wedged = on_wedged
        self._clock = clock
        self._abandoned: list[_Abandoned] = []

    def abandon(self, future: concurrent.futures.Future[object], what: str) -> None:
        """A handler thread ran past its limit; its request was answered already."""
        if not future.done():
            self._abandoned.append(_Abandoned(future, what, self._clock()))

    def running(self) -> int:
        """How many abandoned handler threads still run."""
        return sum(1 for a in self._abandoned if not a.future.done())

    def check(self) -> str | None:
        """Why the worker is wedged (a thread still running `grace` after its limit), or None."""
        now = self._clock()
        self._abandoned = [a for a in self._abandoned if not a.future.done()]
        for abandoned in self._abandoned:
            if now - abandoned.at >= self._grace:
                return (
                    f"handler {abandoned.what} still runs {now - abandoned.at:.0f} s after its "
                    "time limit (a thread cannot be interrupted)"
                )
        return None

    async def run(self, interval: float = 1.0) -> None:
        """Check once per `interval`; call `on_wedged` once, with the reason, and stop."""
        while True:
            await asyncio.sleep(interval)
            reason = self.check()
            if reason is not None:
                self._on_wedged(reason)
                return
