"""The expected state of a pool's worker groups: each key's status, stamped with a generation.

`ACTIVE`: the key's request queue is bound and its group runs; `UNBOUND`: its queue is
unbound and its group still runs, so it can drain. The tracker (`tracker`) moves groups
along this life cycle and publishes each generation; the plans (`reconcile`) read it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

MAX_GENERATION = 2**64 - 1


class GroupStatus(enum.StrEnum):
    ACTIVE = "active"
    UNBOUND = "unbound"


@dataclasses.dataclass(frozen=True)
class PoolState:
    """One generation of the expected state of a pool's worker groups."""

    generation: int
    groups: Mapping[str, GroupStatus]
