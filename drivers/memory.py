"""An in-memory fake driver for users' own tests (like httpx's MockTransport).

It records every call and keeps the set of running groups; `fail_next` makes the next call
raise, to test how a controller copes with a failing engine; keys in `stale` are reported
outdated (the `Upgrades` protocol) until started again; `describe()` gives one worker a group
(the `Describes` protocol).
"""

from __future__ import annotations

import dataclasses

from drivers import base


@dataclasses.dataclass
class MemoryDriver:
    running: set[str] = dataclasses.field(default_factory=set)
    calls: list[tuple[str, str | None]] = dataclasses.field(default_factory=list)
    fail_next: base.DriverError | None = None
    closed: bool = False
    #: Running groups to report as outdated until `start` upgrades them.
    stale: set[str] = dataclasses.field(default_factory=set)

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error

    async def start(self, key: str) -> None:
        self.calls.append(("start", key))
        self._maybe_fail()
        self.running.add(key)
        self.stale.discard(key)

    async def stop(self, key: str) -> None:
        self.calls.append(("stop", key))
        self._maybe_fail()
        self.running.discard(key)

    async def list(self) -> set[str]:
        self.calls.append(("list", None))
        self._maybe_fail()
        return set(self.running)

    async def close(self) -> None:
        self.closed = True

    def outdated(self) -> set[str]:
        return self.stale & self.running

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        return {key: (base.WorkerInfo(worker_id=f"memory-{key}"),) for key in self.running}
