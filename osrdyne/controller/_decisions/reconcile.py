"""Pure plans of the control loops: given what should be and what is, what to do.

No I/O here, so every case is tested without a broker or a driver. Plans remove surplus
first, then create what is missing (a capacity freed before it is taken again).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Set

from osrdyne.controller._decisions.pool_state import GroupStatus


class QueueOp(enum.StrEnum):
    DELETE = "delete"
    UNBIND = "unbind"
    BIND = "bind"
    CREATE = "create"  # declare, and bind if the group is Active


@dataclasses.dataclass(frozen=True)
class QueueAction:
    op: QueueOp
    key: str
    bind: bool = False


def plan_queues(
    expected: Mapping[str, GroupStatus], actual: Mapping[str, GroupStatus]
) -> list[QueueAction]:
    """Actions turning the actual request queues (bound = ACTIVE) into the expected ones."""
    actions = [QueueAction(QueueOp.DELETE, key) for key in sorted(actual.keys() - expected.keys())]
    for key, want in sorted(expected.items()):
        have = actual.get(key)
        if have is None:
            actions.append(QueueAction(QueueOp.CREATE, key, bind=want is GroupStatus.ACTIVE))
        elif want is not have:
            op = QueueOp.BIND if want is GroupStatus.ACTIVE else QueueOp.UNBIND
            actions.append(QueueAction(op, key))
    order = {QueueOp.DELETE: 0, QueueOp.UNBIND: 1, QueueOp.BIND: 2, QueueOp.CREATE: 3}
    return sorted(actions, key=lambda a: order[a.op])


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    stop: list[str]
    start: list[str]
    #: Running and expected, but outdated: brought to the current version with `start`.
    upgrade: list[str] = dataclasses.field(default_factory=list)


def plan_groups(
    expected: Set[str], running: Set[str], outdated: Set[str] = frozenset()
) -> GroupPlan:
    """Groups to stop (running, not expected), then groups to start (expected, not running),
    then groups to upgrade (expected, running, outdated: a stopped group needs no upgrade)."""
    return GroupPlan(
        stop=sorted(running - expected),
        start=sorted(expected - running),
        upgrade=sorted((expected & running) & outdated),
    )
