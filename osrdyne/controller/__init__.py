"""The controller of one pool: keeps a worker group running for every key in use.

`Controller` runs sessions against the broker (`_controller`, which only wires): as leader
of its pool it runs the components of one `_session`: the pool state tracker, the
request-queue and worker-group control loops, and the orphan, dead-letter and activity
consumers. What they decide is in `_decisions/` (pure rules, the clock passed in: the plans,
the gate and admission of new keys, leaderless queues, failing groups, scaling, each key's
history, the status model); what they do to the broker, its management API and the driver is
in `_effects/`. `Settings` is its configuration (`_settings`, `_broker_settings`);
`StatusDocument` is what it reports (`/status`); `poison` is the operators' view of the
poison queue. An operator acts through `Controller.leading()` (warm, stop: `NotLeader` on a
standby, `KeyRefused` for a key the gate refuses; new keys beyond the group cap, the
driver's capacity or the broker's limits are refused `overloaded`); `Controller.history`
keeps each key's recent timeline and dead letters. Every other module is internal.
"""

from osrdyne.controller import poison
from osrdyne.controller._broker_settings import AmqpSettings, BrokerLimitSettings, QueueSettings
from osrdyne.controller._controller import Controller, NotLeader
from osrdyne.controller._decisions.gate import KeyRefused, Refusal
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._decisions.status import (
    AdmissionReport,
    BrokerReport,
    Generations,
    GroupQuery,
    GroupReport,
    GroupSort,
    GroupState,
    Health,
    Leader,
    NodeReport,
    Role,
    ScalingReport,
    StatusDocument,
)
from osrdyne.controller._session import Session
from osrdyne.controller._settings import (
    ApiSettings,
    DriverSettings,
    GroupSettings,
    LogSettings,
    ScalingSettings,
    Settings,
)

__all__ = [
    "AdmissionReport",
    "AmqpSettings",
    "ApiSettings",
    "BrokerLimitSettings",
    "BrokerReport",
    "Controller",
    "DriverSettings",
    "Generations",
    "GroupQuery",
    "GroupReport",
    "GroupSettings",
    "GroupSort",
    "GroupState",
    "GroupStatus",
    "Health",
    "KeyRefused",
    "Leader",
    "LogSettings",
    "NodeReport",
    "NotLeader",
    "QueueSettings",
    "Refusal",
    "Role",
    "ScalingReport",
    "ScalingSettings",
    "Session",
    "Settings",
    "StatusDocument",
    "poison",
]
