"""The control loops' plans: pure functions from (expected, actual) to actions."""

from __future__ import annotations

from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._decisions.reconcile import QueueAction, QueueOp, plan_groups, plan_queues

A, U = GroupStatus.ACTIVE, GroupStatus.UNBOUND


def test_nothing_to_do_when_converged() -> None:
    assert plan_queues({"a": A, "b": U}, {"a": A, "b": U}) == []
    plan = plan_groups({"a"}, {"a"})
    assert plan.start == [] and plan.stop == []


def test_missing_queues_are_created_bound_or_not() -> None:
    assert plan_queues({"a": A, "b": U}, {}) == [
        QueueAction(QueueOp.CREATE, "a", bind=True),
        QueueAction(QueueOp.CREATE, "b", bind=False),
    ]


def test_state_changes_bind_and_unbind() -> None:
    assert plan_queues({"a": A, "b": U}, {"a": U, "b": A}) == [
        QueueAction(QueueOp.UNBIND, "b"),
        QueueAction(QueueOp.BIND, "a"),
    ]


def test_surplus_is_removed_before_anything_is_created() -> None:
    actions = plan_queues({"new": A}, {"old": U, "older": A})
    assert [a.op for a in actions] == [QueueOp.DELETE, QueueOp.DELETE, QueueOp.CREATE]


def test_groups_stop_surplus_and_start_missing() -> None:
    plan = plan_groups(expected={"a", "b"}, running={"b", "c"})
    assert plan.stop == ["c"]
    assert plan.start == ["a"]


def test_outdated_groups_are_upgraded_only_when_running_and_expected() -> None:
    plan = plan_groups({"a", "b", "c"}, {"a", "b", "gone"}, outdated={"b", "c", "gone"})
    assert plan.stop == ["gone"]
    assert plan.start == ["c"]
    assert plan.upgrade == ["b"]
