"""The per-key locks shared by the drivers (`drivers.key_locks.KeyLocks`), without I/O."""

from __future__ import annotations

import asyncio

import pytest

from drivers import key_locks

pytestmark = pytest.mark.timeout(60)


async def test_one_key_at_a_time_other_keys_go_on() -> None:
    locks = key_locks.KeyLocks()
    order: list[str] = []
    release = asyncio.Event()

    async def hold(key: str, name: str, wait: bool) -> None:
        async with locks.hold(key):
            order.append(f"{name} in")
            if wait:
                await release.wait()
            order.append(f"{name} out")

    first = asyncio.create_task(hold("k", "first", True))
    await asyncio.sleep(0)
    second = asyncio.create_task(hold("k", "second", False))
    other = asyncio.create_task(hold("j", "other", False))
    await other  # another key does not wait
    assert order == ["first in", "other in", "other out"]
    assert locks.held() == {"k"}
    release.set()
    await asyncio.gather(first, second)
    assert order[3:] == ["first out", "second in", "second out"]


async def test_a_lock_goes_with_its_last_user_whatever_the_keys_seen() -> None:
    locks = key_locks.KeyLocks()
    for n in range(1000):
        async with locks.hold(f"key-{n}"):
            pass
    assert len(locks) == 0 and locks.held() == set()


async def test_a_waiter_cancelled_leaves_nothing_behind() -> None:
    locks = key_locks.KeyLocks()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("k"):
            await release.wait()

    async def waiter() -> None:
        async with locks.hold("k"):
            raise AssertionError("a cancelled waiter never holds the lock")

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    assert len(locks) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await held
    assert len(locks) == 0


async def test_an_error_inside_releases_the_lock() -> None:
    locks = key_locks.KeyLocks()
    with pytest.raises(RuntimeError):
        async with locks.hold("k"):
            raise RuntimeError("the engine refused")
    async with locks.hold("k"):
        assert locks.held() == {"k"}
    assert len(locks) == 0
