"""A value that changes over time and can be awaited, like tokio's `watch` channel.

The pool state tracker publishes its expected state through one, the control loops publish
the generation they reached through others; readers wait for a change or for a condition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Watch(Generic[T]):
    def __init__(self, value: T) -> None:
        self._value = value
        self._version = 0
        self._changed = asyncio.Event()

    @property
    def value(self) -> T:
        return self._value

    @property
    def version(self) -> int:
        """How many times the value was set; pass it to `changed_since`."""
        return self._version

    def set(self, value: T) -> None:
        self._value = value
        self._version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def changed_since(self, version: int) -> T:
        """Wait until the value was set after `version` was read; return the new value."""
        while self._version == version:
            await self._changed.wait()
        return self._value

    async def wait_for(self, predicate: Callable[[T], bool]) -> T:
        """Wait until `predicate(value)` holds; return that value."""
        while not predicate(self._value):
            await self._changed.wait()
        return self._value
