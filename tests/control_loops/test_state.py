"""The pool state tracker, driven by a fake clock: no broker, no sleeping; an operator's stop
goes through the same two stages."""

from __future__ import annotations

import pytest

from osrdyne.controller._decisions.history import EventKind, KeyHistory
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects.tracker import PoolStateTracker
from tests.control_loops.conftest import Clock


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


def test_stop_unbinds_now_and_stops_after_the_drain(
    tracker: PoolStateTracker, clock: Clock
) -> None:
    tracker.require("a")
    before = tracker.generation
    generation = tracker.stop("a", drain=2)
    assert generation == before + 1  # a new generation: the queue loop unbinds now
    assert tracker.state.value.groups["a"] is GroupStatus.UNBOUND
    clock.now += 1.9
    assert tracker.advance() == pytest.approx(clock.now + 0.1)
    assert "a" in tracker.state.value.groups
    clock.now += 0.1
    assert tracker.advance() is None
    assert tracker.state.value.groups == {}


def test_stop_drains_at_most_the_stop_delay(tracker: PoolStateTracker, clock: Clock) -> None:
    tracker.require("a")
    tracker.stop("a", drain=3600)
    clock.now += 5  # stop_delay
    tracker.advance()
    assert tracker.state.value.groups == {}


def test_stop_of_an_unbound_group_only_brings_its_stop_forward(
    tracker: PoolStateTracker, clock: Clock
) -> None:
    tracker.require("a")
    clock.now += 10
    tracker.advance()  # idle: unbound, stops at +5
    generation = tracker.generation
    assert tracker.stop("a", drain=1) == generation  # nothing new to converge to
    assert tracker.state.version == 2
    clock.now += 1
    tracker.advance()
    assert tracker.state.value.groups == {}


def test_stop_never_postpones_an_earlier_stop(tracker: PoolStateTracker, clock: Clock) -> None:
    tracker.require("a")
    tracker.stop("a", drain=1)
    tracker.stop("a", drain=4)
    clock.now += 1
    tracker.advance()
    assert tracker.state.value.groups == {}


def test_a_request_during_the_drain_makes_a_stopped_group_active_again(
    tracker: PoolStateTracker, clock: Clock
) -> None:
    tracker.require("a")
    tracker.stop("a", drain=2)
    clock.now += 1
    tracker.require("a")
    clock.now += 5
    tracker.advance()
    assert tracker.state.value.groups["a"] is GroupStatus.ACTIVE


def test_stop_of_a_key_without_a_group_does_nothing(tracker: PoolStateTracker) -> None:
    assert tracker.stop("nobody", drain=1) is None
    assert tracker.state.version == 0 and tracker.state.value.groups == {}


def test_every_change_of_state_is_noted_in_the_history(clock: Clock) -> None:
    history = KeyHistory(clock=lambda: clock.now, monotonic=clock)
    tracker = PoolStateTracker(
        unbind_delay=10, stop_delay=5, initial=["old"], clock=clock, history=history
    )
    tracker.require("a", cause="an orphan")
    clock.now += 10
    tracker.advance()  # both idle: unbound
    tracker.require("a", cause="a request")
    tracker.stop("a", drain=1)
    clock.now += 5
    tracker.advance()
    kinds = [e.kind for e in history.events("a")]
    assert kinds == [
        EventKind.REQUIRED,
        EventKind.UNBOUND,
        EventKind.ACTIVE_AGAIN,
        EventKind.UNBOUND,
        EventKind.STOPPED,
    ]
    assert "an orphan" in history.events("a")[0].detail
    assert [e.kind for e in history.events("old")] == [
        EventKind.ADOPTED,
        EventKind.UNBOUND,
        EventKind.STOPPED,
    ]
    assert history.since("a") == clock.now
