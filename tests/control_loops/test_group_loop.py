"""The worker-group loop without a broker: the in-memory driver and a fake clock.

Like kopf's task-adjustment tests: the tracker says what should run, the loop makes the
driver agree, and every case is checked on the driver's call log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from drivers.base import DriverUnavailable
from drivers.memory import MemoryDriver
from osrdyne.controller._effects.group_loop import WorkerGroupLoop
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.ops.metrics import ControllerMetrics
from tests.control_loops.conftest import Clock
from tests.waiting import eventually


@pytest.fixture
def tracker(clock: Clock) -> PoolStateTracker:
    return PoolStateTracker(unbind_delay=10, stop_delay=5, clock=clock)


@pytest.fixture
def driver() -> MemoryDriver:
    return MemoryDriver()


@pytest.fixture
def metrics() -> ControllerMetrics:
    return ControllerMetrics()


@pytest.fixture
async def loop(
    tracker: PoolStateTracker, driver: MemoryDriver, metrics: ControllerMetrics
) -> AsyncIterator[WorkerGroupLoop]:
    group_loop = WorkerGroupLoop(
        driver=driver, tracker=tracker, interval=0.05, metrics=metrics, pool="p"
    )
    task = asyncio.create_task(group_loop.run(), name="worker-group loop under test")
    yield group_loop
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def driver_calls(metrics: ControllerMetrics, op: str, outcome: str) -> float:
    return (
        metrics.registry.get_sample_value(
            "osrdyne_driver_calls_total", {"op": op, "outcome": outcome}
        )
        or 0.0
    )


async def test_required_groups_are_started_and_the_generation_published(
    loop: WorkerGroupLoop, tracker: PoolStateTracker, driver: MemoryDriver
) -> None:
    generation = max(tracker.require("a"), tracker.require("b"))
    await loop.reached.wait_for(lambda reached: reached >= generation)
    assert driver.running == {"a", "b"}
    assert loop.running == {"a", "b"}
    assert [c for c in driver.calls if c[0] == "start"] == [("start", "a"), ("start", "b")]


async def test_groups_stop_once_the_tracker_drops_them(
    loop: WorkerGroupLoop, tracker: PoolStateTracker, driver: MemoryDriver, clock: Clock
) -> None:
    tracker.require("idle")
    tracker.require("busy")
    await eventually(lambda: driver.running == {"idle", "busy"}, what="both started")
    clock.advance(11)  # past unbind_delay: both unbound, still running (they may drain)
    tracker.require("busy")
    tracker.advance()
    assert driver.running == {"idle", "busy"}
    clock.advance(6)  # past stop_delay: idle is gone from the expected state
    tracker.advance()
    await eventually(lambda: driver.running == {"busy"}, what="idle stopped")
    assert ("stop", "idle") in driver.calls and ("stop", "busy") not in driver.calls


async def test_surplus_groups_are_stopped_before_missing_ones_start(
    tracker: PoolStateTracker, driver: MemoryDriver, metrics: ControllerMetrics
) -> None:
    driver.running = {"left-over"}
    tracker.require("wanted")
    group_loop = WorkerGroupLoop(driver=driver, tracker=tracker, interval=5, metrics=metrics)
    assert await group_loop._converge(set(tracker.state.value.groups))
    ops = [c for c in driver.calls if c[0] != "list"]
    assert ops == [("stop", "left-over"), ("start", "wanted")]


async def test_a_failing_driver_is_retried_on_a_later_pass_and_recorded(
    loop: WorkerGroupLoop,
    tracker: PoolStateTracker,
    driver: MemoryDriver,
    metrics: ControllerMetrics,
) -> None:
    driver.fail_next = DriverUnavailable("engine down")
    generation = tracker.require("a")
    await loop.reached.wait_for(lambda reached: reached >= generation)
    assert driver.running == {"a"}
    assert driver_calls(metrics, "list", "error") + driver_calls(metrics, "start", "error") == 1
    assert loop.errors == {}  # the error is cleared once the key's call succeeds


async def test_a_failure_stays_visible_until_the_call_succeeds(
    tracker: PoolStateTracker, driver: MemoryDriver, metrics: ControllerMetrics
) -> None:
    group_loop = WorkerGroupLoop(driver=driver, tracker=tracker, interval=5, metrics=metrics)
    tracker.require("a")
    driver.running.add("listed")  # list succeeds; then start fails
    original = driver.start

    async def failing_start(key: str) -> None:
        raise DriverUnavailable(f"cannot start {key}")

    driver.start = failing_start  # type: ignore[method-assign]
    assert not await group_loop._converge({"a", "listed"})
    assert group_loop.errors["a"].startswith("start: DriverUnavailable")
    driver.start = original  # type: ignore[method-assign]
    assert await group_loop._converge({"a", "listed"})
    assert "a" not in group_loop.errors


async def test_outdated_groups_are_upgraded_with_start(
    loop: WorkerGroupLoop,
    tracker: PoolStateTracker,
    driver: MemoryDriver,
    metrics: ControllerMetrics,
) -> None:
    tracker.require("old")
    await eventually(lambda: driver.running == {"old"}, what="started")
    driver.stale = {"old", "never-running"}
    await eventually(lambda: driver.outdated() == set(), what="upgraded")
    assert driver.calls.count(("start", "old")) == 2
    assert ("start", "never-running") not in driver.calls  # not expected: nothing to upgrade
    assert driver_calls(metrics, "upgrade", "ok") == 1
