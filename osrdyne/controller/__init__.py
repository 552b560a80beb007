"""The controller of one pool: keeps a worker group running for every key in use.

`Controller` runs sessions against the broker (`_controller`): as leader of its pool it runs
the pool state tracker (`tracker`), the request-queue and worker-group control loops
(`queue_loop`, `group_loop`, with their pure plans in `reconcile`), and the orphan,
dead-letter and activity consumers (`orphans`, `dead_letters`, `activity`), all built
together as one `_session`. `Settings` is its configuration; `StatusDocument` is what it
reports (`/status`); `poison` is the operators' view of the poison queue. An operator acts
through `Controller.leading()` (warm, stop: `NotLeader` on a standby, `KeyRefused` for a key
the gate refuses, `gate`; new keys beyond the group cap, the driver's capacity or the
broker's limits are refused `overloaded`, `admission`, `broker_limits`);
`Controller.history` keeps each key's recent timeline and dead letters (`history`).
Every other module is internal.
"""

from osrdyne.controller import poison
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
    AmqpSettings,
    ApiSettings,
    BrokerLimitSettings,
    DriverSettings,
    GroupSettings,
    LogSettings,
    QueueSettings,
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
