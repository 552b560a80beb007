"""The pace of the queue loop's broker operations, without a broker: a slow start until the
first congestion, additive increase after it, halved on congestion, never past the floor or
the ceiling, and never more operations at once than the limit."""

from __future__ import annotations

import asyncio

import pytest

from osrdyne.controller._effects.pacing import AimdLimit


def test_slow_start_then_additive_increase_multiplicative_decrease_within_bounds() -> None:
    pace = AimdLimit(initial=8, minimum=1, maximum=32)
    for _ in range(8):
        pace.success()
    assert pace.limit == 16  # slow start: one more slot per success (doubles each round)
    for _ in range(30):
        pace.success()
    assert pace.limit == 32  # never past the ceiling
    pace.congestion()
    assert pace.limit == 16
    for _ in range(16):
        pace.success()
    assert pace.limit == 16  # 16.97: after a congestion, 1/limit per success
    pace.success()
    assert pace.limit == 17
    for _ in range(1000):
        pace.success()
    assert pace.limit == 32
    for _ in range(10):
        pace.congestion()
    assert pace.limit == 1
    for _ in range(3):
        pace.success()
    assert pace.limit == 2  # additive from the floor: no second slow start
    with pytest.raises(ValueError):
        AimdLimit(initial=0, maximum=4)


async def test_never_more_at_once_than_the_limit() -> None:
    pace = AimdLimit(initial=3, maximum=3)
    running = peak = 0

    async def operation() -> None:
        nonlocal running, peak
        async with pace.slot():
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            running -= 1

    await asyncio.gather(*(operation() for _ in range(50)))
    assert peak == 3 and pace.in_use == 0
    pace.congestion()  # 1.5: one at a time
    peak = 0
    await asyncio.gather(*(operation() for _ in range(10)))
    assert peak == 1
