"""The noop driver: worker groups are started by hand (or by another system).

It starts and stops nothing and lists nothing; osrdyne still manages queues, orphans and dead
letters, and workers started manually report activity that keeps their group's queue alive.
It says so (`base.Unlisted`): the worker-group loop then counts a group started once it asked
for it, instead of asking again on every pass. It sizes nothing (no `base.Sizes`).
"""

from __future__ import annotations

from drivers import base


class NoopDriver:
    def __init__(self, context: base.PoolContext) -> None:
        self.context = context

    async def start(self, key: str) -> None:
        return None

    async def stop(self, key: str) -> None:
        return None

    async def list(self) -> set[str]:
        return set()

    def cannot_list(self) -> bool:
        """The `Unlisted` protocol: what runs is unknown to this driver."""
        return True

    async def close(self) -> None:
        return None
