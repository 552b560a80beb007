"""The controller's gauges: group counts, generation lags, admission limits, the broker's
limits and nodes, standby workers, and the fast-path estimate from the request exchange's
statistics. Set once a second while a session leads, from memory (the broker's figures as the
limits reading and the queue listing last read them), the exchange read every 5 s. They read
the snapshots of the session they run in (`snapshot`), not the controller."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable

import httpx

from drivers.base import Driver, Standby
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import reporting
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.snapshot import SessionSnapshot
from osrdyne.ops.metrics import ControllerMetrics, FastPathEstimate
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)


class Gauges:
    def __init__(
        self, *, metrics: ControllerMetrics, driver: Driver, api: ManagementApi, names: PoolNames
    ) -> None:
        self._metrics = metrics
        self._driver = driver
        self._api = api
        self._names = names
        #: What the broker-node gauges were last set from (listing, limits reading).
        self._nodes_gauged: tuple[int, float] | None = None

    async def run(
        self, fast_path: FastPathEstimate, snapshot: Callable[[], SessionSnapshot]
    ) -> None:
        """Set the gauges every second from the leading session's `snapshot` (a task of the
        session)."""
        ticks = 0
        while True:
            await asyncio.sleep(1.0)
            ticks += 1
            if ticks % 5 == 0:  # the broker refreshes its statistics every 5 s by default
                await self.read_exchange_stats(fast_path)
            session = snapshot()
            m = self._metrics
            counts = collections.Counter(session.expected.values())
            for state in GroupStatus:
                m.groups.labels(state.value).set(counts[state])
            generation = session.generation
            m.generation_lag.labels("queues").set(generation - session.queues.generation)
            m.generation_lag.labels("groups").set(generation - session.groups_generation)
            self._limits(session)
            if isinstance(self._driver, Standby):
                m.standby_workers.set(len(self._driver.standby_workers()))

    def _limits(self, session: SessionSnapshot) -> None:
        """The caps on new keys and the broker's limits, as gauges."""
        admission = session.admission
        m = self._metrics
        for name, value in (
            ("max_groups", admission.max_groups),
            ("driver_capacity", admission.driver_capacity),
            ("broker_room", admission.broker_room),
        ):
            if value is not None:
                m.admission_limit.labels(name).set(value)
        figures = session.broker_figures
        if figures is None:
            return
        for resource, used, limit in (
            ("fd", figures.fd_used, figures.fd_total),
            ("processes", figures.proc_used, figures.proc_total),
            ("memory", figures.mem_used, figures.mem_limit),
            ("queues", figures.queues, None),
        ):
            if used is not None:
                m.broker_used.labels(resource).set(used)
            if limit is not None:
                m.broker_limit.labels(resource).set(limit)
        m.broker_alarm.labels("memory").set(1 if figures.mem_alarm else 0)
        m.broker_alarm.labels("disk").set(1 if figures.disk_alarm else 0)
        listing = session.listing
        reading = (id(listing), figures.time)
        if reading == self._nodes_gauged:
            return  # nothing new since the last pass (the listing can hold 10,000 queues)
        self._nodes_gauged = reading
        for node in reporting.node_reports(figures, listing):
            for figure, value in (
                ("running", int(node.running)),
                ("partitions", len(node.partitions)),
                ("pool_connections", node.pool_connections),
                ("queue_leaders", node.queue_leaders),
                ("members_missing", node.members_missing),
            ):
                if value is not None:
                    m.broker_node.labels(node.name, figure).set(value)

    async def read_exchange_stats(self, fast_path: FastPathEstimate) -> None:
        """Feed the fast-path estimate with the request exchange's publish count."""
        try:
            # Bounded: the management API retries for longer, and leading must not wait on it.
            async with asyncio.timeout(10):
                exchange = await self._api.exchange(self._names.request_exchange)
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            logger.debug("cannot read the request exchange's statistics: %s", exc)
            return
        if exchange is None:
            return
        # No `message_stats` yet: nothing was ever published to the exchange.
        published = (exchange.get("message_stats") or {}).get("publish_in", 0)
        if isinstance(published, int | float):
            fast_path.observe(float(published))
