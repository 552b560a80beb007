"""The activity processor: worker reports folded into few tracker updates.

Workers report `started`, `ready` and `request-received` (already rate-limited on their side).
A report keeps its group Active; reports of one key closer than `fold` seconds are folded into
one tracker update that carries `fold` seconds of extra lifetime, so folding never shortens a
group's life. Malformed reports are logged and skipped.
"""

from __future__ import annotations

import logging
import time

import aio_pika.abc

from osrdyne import logs, protocol
from osrdyne.consumer import QueueConsumer
from osrdyne.metrics import ColdStartClock, ControllerMetrics
from osrdyne.state import PoolStateTracker

logger = logging.getLogger(__name__)

_EVENTS = {e.value for e in protocol.Event}


class ActivityProcessor(QueueConsumer):
    def __init__(
        self,
        channel: aio_pika.abc.AbstractChannel,
        *,
        names: protocol.PoolNames,
        tracker: PoolStateTracker,
        metrics: ControllerMetrics,
        cold_starts: ColdStartClock,
        fold: float,
        prefetch: int = 256,
    ) -> None:
        super().__init__(channel, prefetch=prefetch)
        self.queue_name = names.activity_queue
        self._names = names
        self._tracker = tracker
        self._metrics = metrics
        self._cold_starts = cold_starts
        self._fold = fold
        self._last: dict[str, float] = {}
        #: Wall-clock time of each key's last valid report (the status document shows it).
        self.last_seen: dict[str, float] = {}

    async def handle(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.ack()
        key = message.routing_key or ""
        event = (message.headers or {}).get(protocol.Header.EVENT)
        if isinstance(event, bytes):
            event = event.decode(errors="replace")
        if event not in _EVENTS or protocol.key_problem(self._names, key) is not None:
            self._metrics.activity_malformed.inc()
            logger.warning(
                "skipping malformed activity report: key=%r event=%r",
                key,
                event,
                extra=logs.fields(pool=self._names.pool, key=key),
            )
            return
        self._metrics.activity.labels(event).inc()
        self.last_seen[key] = time.time()
        now = time.monotonic()
        if event != protocol.Event.REQUEST_RECEIVED:
            worker = (message.headers or {}).get(protocol.Header.WORKER_ID)
            logger.info(
                "worker of key %r: %s",
                key,
                event,
                extra=logs.fields(
                    pool=self._names.pool,
                    key=key,
                    worker_id=worker.decode(errors="replace")
                    if isinstance(worker, bytes)
                    else worker,
                ),
            )
        if event == protocol.Event.READY:
            self._cold_starts.end(key, now)
        if now - self._last.get(key, float("-inf")) < self._fold:
            self._metrics.activity_folded.inc()
            return
        if len(self._last) > 10_000:  # forget keys quiet for longer than the fold window
            self._last = {k: t for k, t in self._last.items() if now - t < self._fold}
            self.last_seen = {
                k: self.last_seen[k]
                for k in self._tracker.state.value.groups
                if k in self.last_seen
            }
        self._last[key] = now
        self._tracker.require(key, extra_lifetime=self._fold)
