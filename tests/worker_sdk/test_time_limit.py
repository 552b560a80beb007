"""A handler's time limit (`watchdog.time_limit`, `watchdog.within_limit`), without a broker:
which limit applies, and that only the limit's own timeout is answered as a stall."""

from __future__ import annotations

import asyncio

import pytest

from worker_sdk import watchdog


def test_the_limit_is_the_handler_timeout_without_a_deadline() -> None:
    assert watchdog.time_limit(handler_timeout=30, stall_grace=2, time_left=None) == 30


def test_a_sooner_deadline_plus_the_grace_wins() -> None:
    assert watchdog.time_limit(handler_timeout=30, stall_grace=2, time_left=5) == 7
    assert watchdog.time_limit(handler_timeout=30, stall_grace=2, time_left=100) == 30


async def test_work_within_its_limit_gives_its_result() -> None:
    async def work() -> str:
        return "done"

    assert await watchdog.within_limit(work(), 60) == "done"


async def test_work_past_its_limit_is_a_stall_naming_the_limit() -> None:
    never = asyncio.Event()
    with pytest.raises(watchdog.Stalled) as caught:
        await watchdog.within_limit(never.wait(), 0.01)
    assert caught.value.details == {"reason": "timeout", "limit_s": 0.01}
    assert "0.01 s" in caught.value.message


async def test_a_timeout_of_the_handler_s_own_is_not_a_stall() -> None:
    async def work() -> None:
        raise TimeoutError("the handler's own")

    with pytest.raises(TimeoutError, match="the handler's own"):
        await watchdog.within_limit(work(), 60)
