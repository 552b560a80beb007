"""The pool state tracker, driven by a fake clock: no broker, no sleeping."""

from __future__ import annotations

import pytest

from osrdyne.state import GroupStatus, PoolStateTracker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tracker(clock: Clock) -> PoolStateTracker:
    return PoolStateTracker(unbind_delay=10, stop_delay=5, clock=clock)


def test_require_makes_a_group_active_in_a_new_generation(tracker: PoolStateTracker) -> None:
    start = tracker.generation
    generation = tracker.require("a")
    assert generation == start + 1
    assert tracker.state.value.groups == {"a": GroupStatus.ACTIVE}
    assert tracker.state.value.generation == generation


def test_requiring_an_active_group_keeps_the_generation(tracker: PoolStateTracker) -> None:
    first = tracker.require("a")
    assert tracker.require("a") == first
    assert tracker.state.version == 1


def test_idle_group_is_unbound_then_stopped(tracker: PoolStateTracker, clock: Clock) -> None:
    tracker.require("a")
    clock.now += 9.9
    assert tracker.advance() == pytest.approx(1010.0)
    assert tracker.state.value.groups["a"] is GroupStatus.ACTIVE
    clock.now += 0.1
    assert tracker.advance() == pytest.approx(1015.0)  # stop deadline
    assert tracker.state.value.groups["a"] is GroupStatus.UNBOUND
    clock.now += 5
    assert tracker.advance() is None
    assert tracker.state.value.groups == {}


def test_activity_extends_the_active_period(tracker: PoolStateTracker, clock: Clock) -> None:
    tracker.require("a")
    clock.now += 8
    tracker.require("a", extra_lifetime=2)
    clock.now += 11
    tracker.advance()
    assert tracker.state.value.groups["a"] is GroupStatus.ACTIVE
    clock.now += 1
    tracker.advance()
    assert tracker.state.value.groups["a"] is GroupStatus.UNBOUND


def test_request_while_unbound_reactivates(tracker: PoolStateTracker, clock: Clock) -> None:
    tracker.require("a")
    clock.now += 10
    tracker.advance()
    unbound_generation = tracker.generation
    generation = tracker.require("a")
    assert generation == unbound_generation + 1
    assert tracker.state.value.groups["a"] is GroupStatus.ACTIVE
    clock.now += 9  # the stop deadline of the earlier Unbound period is gone
    tracker.advance()
    assert tracker.state.value.groups["a"] is GroupStatus.ACTIVE


def test_initial_groups_are_active(clock: Clock) -> None:
    tracker = PoolStateTracker(unbind_delay=10, stop_delay=5, initial=["x", "y"], clock=clock)
    assert tracker.state.value.groups == {"x": GroupStatus.ACTIVE, "y": GroupStatus.ACTIVE}


def test_generations_only_grow(tracker: PoolStateTracker, clock: Clock) -> None:
    seen = [tracker.generation]
    for step in range(20):
        tracker.require(f"k{step % 3}")
        clock.now += 4
        tracker.advance()
        seen.append(tracker.state.value.generation)
    assert seen == sorted(seen)
    assert len(set(seen)) > 3


async def test_subscribers_see_each_new_state(tracker: PoolStateTracker) -> None:
    version = tracker.state.version
    tracker.require("a")
    state = await tracker.state.changed_since(version)
    assert "a" in state.groups
