"""One lock per worker key: a driver's start, stop and resize of one group run one at a time,
while other keys' go on.

A key's lock exists while someone holds it or waits for it, and goes with the last of them:
the locks of a driver that saw many keys are those in use now, not one per key ever seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator


@dataclasses.dataclass
class _Entry:
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    #: Tasks holding or waiting for the lock.
    users: int = 0


class KeyLocks:
    """The per-key locks of one driver."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold the lock of `key` for the block (waiting for whoever holds it)."""
        entry = self._entries.setdefault(key, _Entry())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]

    def held(self) -> set[str]:
        """The keys whose lock someone holds now."""
        return {key for key, entry in self._entries.items() if entry.lock.locked()}

    def __len__(self) -> int:
        """The keys whose lock is in use (held or waited for)."""
        return len(self._entries)
