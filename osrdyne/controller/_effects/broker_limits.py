"""The broker's limits as the management API reports them, read periodically.

RabbitMQ runs out of file descriptors long before it runs out of memory when it holds many
quorum queues: at its default open-files limit of 1024 it stopped completing AMQP handshakes
after about 440 of them (issue 10), wedging every client of the broker and the controller
with them. So the controller reads the broker's file descriptors, Erlang processes, memory
and disk alarms and queue count every `broker.check_interval` seconds (each reading bounded
by `broker.check_timeout`) and refuses new keys before the broker runs out (`admission`).

In a cluster the most constrained running node speaks for the broker (a quorum queue has a
member on several nodes); an alarm on any node is an alarm. What a node does not report is
None: unknown, never a guessed zero. A reading that fails keeps the previous figures (and
says why in `error`): the groups admitted since still count against them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from osrdyne.controller._decisions.broker_figures import (
    BrokerFigures,
    figures_of,
    nodes_of,
)
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.ops import logs

logger = logging.getLogger(__name__)

#: The columns of `/api/nodes` read (the rest of a node's document is large).
NODE_COLUMNS = (
    "name,running,partitions,fd_used,fd_total,proc_used,proc_total,mem_used,mem_limit,"
    "mem_alarm,disk_free,disk_free_limit,disk_free_alarm"
)
#: Pages of 500 connections read at most to count the pool's connections per node.
CONNECTION_PAGES = 20


class BrokerLimits:
    """The last reading of the broker's limits, refreshed by `run()`.

    `groups` counts the pool's groups now; the count at the last reading is kept, so the
    admission checks know how many queues were asked of the broker since (`new_since_read`).
    """

    def __init__(
        self,
        api: ManagementApi,
        *,
        interval: float,
        timeout: float,
        groups: Callable[[], int],
        pool: str = "",
    ) -> None:
        self._api = api
        self._pool = pool
        self._interval = interval
        self._timeout = timeout
        self._groups = groups
        self._groups_at_read = 0
        self.figures: BrokerFigures | None = None
        #: Why the last reading failed (None: it succeeded).
        self.error: str | None = None
        #: Readings made, failed ones included.
        self.readings = 0
        self.changed = asyncio.Event()

    def new_since_read(self) -> int:
        """Groups admitted since the figures were read (their queues may not show yet)."""
        return max(0, self._groups() - self._groups_at_read)

    async def read(self) -> None:
        """Read the figures once, within the timeout; on failure keep the last ones."""
        groups = self._groups()
        try:
            async with asyncio.timeout(self._timeout):
                nodes = await self._api.nodes(columns=NODE_COLUMNS)
                overview = await self._api.overview(columns="object_totals")
            connections = await self._connections()
        except (httpx.HTTPError, OSError, TimeoutError, ValueError, KeyError) as exc:
            error = logs.redact(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            if error != self.error:
                logger.warning("cannot read the broker's limits: %s", error)
            self.error = error
        else:
            health = nodes_of(nodes, connections, pool=self._pool)
            self.figures = figures_of(nodes, overview, at=time.time(), health=health)
            self._groups_at_read = groups
            self.error = None
        finally:
            self.readings += 1
            self.changed.set()

    async def _connections(self) -> list[dict[str, Any]] | None:
        """The broker's connections (node and name), None when they cannot be read: the
        limits still count, the per-node connection counts are then unknown."""
        try:
            async with asyncio.timeout(self._timeout):
                return await self._api.connections(
                    columns="node,client_properties", max_pages=CONNECTION_PAGES
                )
        except (httpx.HTTPError, OSError, TimeoutError, ValueError, KeyError) as exc:
            logger.debug("cannot read the broker's connections: %s", logs.redact(str(exc)))
            return None

    async def run(self) -> None:
        """Read again every `interval` (the session reads once before it takes orphans)."""
        while True:
            await asyncio.sleep(self._interval)
            await self.read()
