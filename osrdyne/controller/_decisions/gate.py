"""The gate every group passes before the tracker requires it: one decision for every way in.

A group is required for the first orphan of its key (`orphans`) or for an operator's warm
(`Session.warm`): both ask `Gate.admit(key)` first, so both refuse the same keys for the same
reasons. A key that can never have a request queue (`wire.key_problem`) is refused
`invalid_key`. A key that already has a group is always admitted; a new key then passes the
`new_key` checks in order (the group cap, the driver's capacity and the broker's limits of
`admission` are such checks: each says why it refuses, or None), so a limit on new groups is
one more check here, not a second copy in each caller. Admitting and requiring happen with no
`await` in between (in the orphan processor as in `warm`): a burst cannot slip past a cap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from osrdyne import wire
from osrdyne.exceptions import OsrdyneError


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a key is not admitted, and the status it is answered with."""

    status: wire.Status
    error: str
    #: A word for programs (`max_groups`, `broker_fd`, ...), the `reason` of the answer.
    reason: str = ""
    #: Figures behind the decision (the limit and its use), in the answer's `details`.
    details: Mapping[str, Any] | None = None


class KeyRefused(OsrdyneError):
    """An operator's action on a key the gate refuses."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.error)
        self.refusal = refusal


#: A check of a new key: why it cannot have a group now, or None.
NewKeyCheck = Callable[[str], Refusal | None]


class Gate:
    def __init__(
        self,
        names: wire.PoolNames,
        expected: Callable[[], Container[str]],
        *,
        new_key: Sequence[NewKeyCheck] = (),
    ) -> None:
        self._names = names
        #: The keys that have a group now (the tracker's expected state).
        self._expected = expected
        self._new_key = tuple(new_key)

    def admit(self, key: str) -> Refusal | None:
        """None when `key` may have a group now; else why not."""
        problem = wire.key_problem(self._names, key)
        if problem is not None:
            return Refusal(wire.Status.INVALID_KEY, problem, reason="invalid_key")
        if key in self._expected():
            return None
        for check in self._new_key:
            refusal = check(key)
            if refusal is not None:
                return refusal
        return None
