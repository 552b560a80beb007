"""How many broker operations a control loop runs at once: as many as the broker keeps up with.

A burst of new keys asks the broker for many queue declares and binds at once. Unbounded, they
pile up in the broker (a quorum queue's declare starts a Raft cluster: slow) until every one
of them times out; bounded too tightly, a burst waits on round trips. `AimdLimit` paces them as
TCP paces packets: a slow start first (one more slot per operation that succeeds: the limit
doubles each round of operations) until the first congestion or the ceiling; after a
congestion, additive increase (one more slot per `limit` operations that succeed) and
multiplicative decrease (half the slots when one times out or the broker refuses), between a
floor and a ceiling. It is a plain object, tested without a broker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class AimdLimit:
    def __init__(self, *, initial: int, minimum: int = 1, maximum: int) -> None:
        if not 1 <= minimum <= initial <= maximum:
            raise ValueError(f"need 1 <= minimum {minimum} <= initial {initial} <= {maximum}")
        self.minimum = minimum
        self.maximum = maximum
        self._limit = float(initial)
        #: Slow start (TCP's `ssthresh`): one more slot per success below it; set to the
        #: halved limit by a congestion, so growth is additive from there on.
        self._threshold = float(maximum)
        self._in_use = 0
        self._changed = asyncio.Condition()

    @property
    def limit(self) -> int:
        """Operations allowed at once now."""
        return int(self._limit)

    @property
    def in_use(self) -> int:
        return self._in_use

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for a free slot, hold it for the operation."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._in_use < self.limit)
            self._in_use += 1
        try:
            yield
        finally:
            self._in_use -= 1
            async with self._changed:
                # Wake as many waiters as there are free slots, not all of them: a burst
                # queues hundreds, and waking each on every release costs O(waiters) each.
                self._changed.notify(max(1, self.limit - self._in_use))

    def success(self) -> None:
        """An operation the broker did in time: one more slot per success in slow start, one
        more per `limit` of them after a congestion."""
        step = 1.0 if self._limit < self._threshold else 1.0 / self._limit
        self._limit = min(float(self.maximum), self._limit + step)

    def congestion(self) -> None:
        """An operation timed out or the broker refused it: half the slots, and slow start
        ends (growth is additive from there on)."""
        self._limit = max(float(self.minimum), self._limit / 2)
        self._threshold = self._limit
