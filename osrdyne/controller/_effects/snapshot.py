"""What the status document and the gauges read: snapshots the controller hands them.

`ControllerSnapshot` is the controller's own state at one moment (its role, sessions, last
error, broker node) and, while it leads, a `SessionSnapshot`: the figures of the session's
components (expected state, what each loop reached, activity, failing groups, admission and
the broker's limits). Reporting and gauges read these and never the controller or its
session, so neither depends on the objects that build and run them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet

from osrdyne.controller._decisions.breaker import Failing
from osrdyne.controller._decisions.broker_figures import BrokerFigures
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._decisions.status import AdmissionReport, BrokerReport, Role, ScalingReport
from osrdyne.controller._effects.queue_loop import QueuesReached
from osrdyne.controller._effects.topology import RequestQueues


@dataclasses.dataclass(frozen=True)
class SessionSnapshot:
    """The leader session's figures, read at one moment (mappings are the components' own:
    read them at once, do not keep them)."""

    #: The expected state: each key's status, and its generation.
    expected: Mapping[str, GroupStatus]
    generation: int
    #: What the request-queue loop last published, and its last listing of the queues.
    queues: QueuesReached
    listing: RequestQueues | None
    #: The generation the worker-group loop reached, the groups it runs, and its errors.
    groups_generation: int
    running: AbstractSet[str]
    group_errors: Mapping[str, str]
    #: When each key's workers last reported (epoch seconds).
    last_seen: Mapping[str, float]
    #: The groups whose workers keep failing to start.
    failing: Mapping[str, Failing]
    #: The scaler's view of a key (None: the pool does not scale its groups).
    scaling: Callable[[str], ScalingReport | None] | None
    admission: AdmissionReport
    broker: BrokerReport | None
    #: The last reading of the broker's limits (None: not read yet).
    broker_figures: BrokerFigures | None


@dataclasses.dataclass(frozen=True)
class ControllerSnapshot:
    """The controller's state at one moment."""

    role: Role
    sessions: int
    last_error: str | None
    broker_node: str | None
    #: The session it leads (None: it does not lead).
    session: SessionSnapshot | None
