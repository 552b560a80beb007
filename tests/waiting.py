"""Bounded waiting for eventually-true conditions (a bound, never a timing assertion)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def eventually(
    condition: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> Any:
    """Poll `condition` (sync or async) until it returns a truthy value; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s (last: {value!r})")
        await asyncio.sleep(interval)
