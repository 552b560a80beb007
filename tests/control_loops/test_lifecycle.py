"""A group's life cycle as the pure rule decides it, on a fake clock
(`osrdyne.controller._decisions.lifecycle`): what moves on when, and what an operator's stop
does; the tracker (tests/control_loops/test_state.py) publishes it."""

from __future__ import annotations

from osrdyne.controller._decisions.history import EventKind
from osrdyne.controller._decisions.lifecycle import Lifecycle, Stop, Transition
from osrdyne.controller._decisions.pool_state import GroupStatus
from tests.control_loops.conftest import Clock


def lifecycle(clock: Clock, initial: tuple[str, ...] = ()) -> Lifecycle:
    return Lifecycle(unbind_delay=10, stop_delay=5, initial=initial, clock=clock)


def test_a_new_group_is_required_then_kept_active_by_more_requests(clock: Clock) -> None:
    groups = lifecycle(clock)
    assert groups.require("a") is EventKind.REQUIRED
    assert groups.require("a", extra_lifetime=3) is None  # active already: deadline pushed
    assert groups.statuses == {"a": GroupStatus.ACTIVE}
    clock.advance(12)
    moved, upcoming = groups.advance()
    assert not moved and upcoming == 1013.0  # nothing due before 10 + 3


def test_an_idle_group_is_unbound_then_stopped_in_order(clock: Clock) -> None:
    groups = lifecycle(clock, initial=("adopted",))
    clock.advance(10)
    moved, upcoming = groups.advance()
    assert moved == [Transition("adopted", EventKind.UNBOUND, 10)] and upcoming == 1015.0
    assert groups.statuses == {"adopted": GroupStatus.UNBOUND}
    assert groups.require("adopted") is EventKind.ACTIVE_AGAIN  # a request brings it back
    clock.advance(10)
    groups.advance()
    clock.advance(5)
    moved, upcoming = groups.advance()
    assert moved == [Transition("adopted", EventKind.STOPPED, 5)] and upcoming is None
    assert groups.statuses == {} and groups.removals == 1


def test_an_operator_s_stop_unbinds_now_and_stops_after_the_drain(clock: Clock) -> None:
    groups = lifecycle(clock)
    assert groups.stop("none", drain=1)[0] is Stop.NO_GROUP
    groups.require("a")
    assert groups.stop("a", drain=60) == (Stop.UNBOUND, 5)  # at most stop_delay
    assert groups.statuses == {"a": GroupStatus.UNBOUND}
    assert groups.stop("a", drain=2) == (Stop.SOONER, 2)
    assert groups.stop("a", drain=3)[0] is Stop.UNCHANGED
    clock.advance(2)
    moved, _ = groups.advance()
    assert [m.kind for m in moved] == [EventKind.STOPPED]
