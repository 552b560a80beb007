"""Quorum request queues without a leader, looked at and made again by the request-queue
loop: the looking and the deleting of the rule in `leaderless` (which judges each suspect).

A suspect due a look is read from the management API, at the broker's pace; one judged
leaderless is unbound (its key withdrawn first: what is published meanwhile goes to the
orphans, which hold it) and deleted unless the broker counts a request or a consumer in it
(then it has a leader after all: the statistics were late). The next pass declares it again
after `queue_repairs.DELETED_GRACE`, as after someone else's deletion. Such a queue holds
nothing: either no leader ever appended to its log, or (RabbitMQ 3.10.8,
rabbitmq-server#15725) its member came back from the crash as a new, empty one, what its
first leader had confirmed lost in the broker (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from osrdyne.controller._decisions.leaderless import Suspects, Verdict
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects.channels import ChannelPool
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.migration import LegacyQueues
from osrdyne.controller._effects.pacing import AimdLimit
from osrdyne.controller._effects.queue_operations import OwnChanges
from osrdyne.controller._effects.queue_repairs import DELETED_GRACE
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)

#: Leaderless queues deleted per pass of the loop (at once): the broker holds each deletion
#: 5 s waiting for a leader, and 91 at once kept a controller's own operations waiting past
#: its lease (seen in CI); the others wait for the next passes.
LEADERLESS_DELETES = 4


class LeaderlessQueues:
    def __init__(
        self,
        *,
        suspects: Suspects,
        api: ManagementApi,
        channels: ChannelPool,
        names: PoolNames,
        legacy: LegacyQueues,
        own: OwnChanges,
        pacing: AimdLimit,
        metrics: ControllerMetrics,
        operation_timeout: float,
        interval: float,
        withdraw: Callable[..., None],
        poke: Callable[[], None],
    ) -> None:
        self.suspects = suspects
        self._api = api
        self._channels = channels
        self._names = names
        self._legacy = legacy
        self._own = own
        self._pacing = pacing
        self._metrics = metrics
        self._operation_timeout = operation_timeout
        self._interval = interval
        self._withdraw = withdraw
        self._poke = poke

    async def look(self, actual: dict[str, GroupStatus]) -> None:
        """Look at the suspects that are due, at the broker's pace; delete each queue judged
        leaderless, `LEADERLESS_DELETES` at most (the others stay due: a pass at once)."""
        due = self.suspects.due()
        budget = [LEADERLESS_DELETES]
        await asyncio.gather(*(self._look(key, actual, budget) for key in due))
        if due and not budget[0]:
            self._poke()  # more may be due: the next pass, without waiting

    async def _look(self, key: str, actual: dict[str, GroupStatus], budget: list[int]) -> None:
        """One look at a suspect; a deletion only while `budget[0]` (this pass's) lasts."""
        suspect, name = self.suspects.get(key), self._legacy.queue_name(key)
        async with self._pacing.slot():
            try:
                # The broker's own deletion of such a queue waits for a leader (5 s).
                async with asyncio.timeout(self._operation_timeout + 5):
                    info = await self._api.queue(name)
                    verdict = self.suspects.judge(
                        key, info, wanted=key in actual, may_delete=budget[0] > 0
                    )
                    if verdict is Verdict.LEADERLESS:
                        budget[0] -= 1
                        since = suspect.first if suspect.first is not None else time.monotonic()
                        await self._delete(key, name, actual, since)
            except Exception as exc:  # the management API down or slow: a look later
                after = self.suspects.after or 0.0
                self.suspects.retry(key, suspect, delay=min(after, self._interval))
                logger.warning(
                    "could not look at the request queue of %r for a leader: %s",
                    key,
                    logs.redact(f"{type(exc).__name__}: {exc}"),
                    extra=logs.fields(pool=self._names.pool, key=key),
                )

    async def _delete(
        self, key: str, name: str, actual: dict[str, GroupStatus], since: float
    ) -> None:
        """Unbind `key`'s queue (the key is withdrawn first), and delete it unless the broker
        counts a request or a consumer in it (then it has a leader after all: the statistics
        were late, and the next pass, at once, binds it again)."""
        self._own.note(name)
        self._withdraw(key)
        async with self._channels.channel() as channel:
            queue = await channel.get_queue(name, ensure=False)
            await queue.unbind(self._names.request_exchange, routing_key=key)
            actual[key] = GroupStatus.UNBOUND
            counted = (await channel.declare_queue(name, passive=True)).declaration_result
        if counted.message_count or counted.consumer_count:
            logger.info(
                "request queue of %r showed no statistics but holds %d request(s) and %d "
                "consumer(s): kept",
                key,
                counted.message_count,
                counted.consumer_count,
                extra=logs.fields(pool=self._names.pool, key=key),
            )
            self._poke()
            return
        await self._api.delete_queue(name)
        actual.pop(key, None)
        self._legacy.forget(key)
        self._metrics.queue_ops.labels("leaderless_delete").inc()
        # Declared again after the grace a deletion by someone else gets (`queue_repairs`).
        asyncio.get_running_loop().call_later(DELETED_GRACE, self._poke)
        logger.warning(
            "request queue of %r had no leader for %.0fs with every member online (a quorum "
            "queue the broker never elected a leader for, as after a crash during its "
            "declaration): deleted, declared again",
            key,
            time.monotonic() - since,
            extra=logs.fields(pool=self._names.pool, key=key),
        )
