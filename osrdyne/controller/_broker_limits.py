"""The broker's limits as the management API reports them, read periodically.

RabbitMQ runs out of file descriptors long before it runs out of memory when it holds many
quorum queues: at its default open-files limit of 1024 it stopped completing AMQP handshakes
after about 440 of them (issue 10), wedging every client of the broker and the controller
with them. So the controller reads the broker's file descriptors, Erlang processes, memory
and disk alarms and queue count every `broker.check_interval` seconds (each reading bounded
by `broker.check_timeout`) and refuses new keys before the broker runs out (`_admission`).

In a cluster the most constrained running node speaks for the broker (a quorum queue has a
member on several nodes); an alarm on any node is an alarm. What a node does not report is
None: unknown, never a guessed zero. A reading that fails keeps the previous figures (and
says why in `error`): the groups admitted since still count against them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from osrdyne.controller._management import ManagementApi
from osrdyne.ops import logs

logger = logging.getLogger(__name__)

#: The columns of `/api/nodes` read (the rest of a node's document is large).
NODE_COLUMNS = (
    "name,running,partitions,fd_used,fd_total,proc_used,proc_total,mem_used,mem_limit,"
    "mem_alarm,disk_free,disk_free_limit,disk_free_alarm"
)
#: Pages of 500 connections read at most to count the pool's connections per node.
CONNECTION_PAGES = 20


@dataclasses.dataclass(frozen=True)
class NodeHealth:
    """One broker node as the management API and the pool's connections see it."""

    name: str
    running: bool
    #: Nodes this one cannot reach (a network partition as it sees it).
    partitions: tuple[str, ...]
    mem_alarm: bool
    disk_alarm: bool
    #: Connections of this pool's controller and workers on the node (None: not read).
    pool_connections: int | None


@dataclasses.dataclass(frozen=True)
class BrokerFigures:
    """One reading of the broker's limits and their use."""

    #: The node the figures are of (the most constrained running one).
    node: str | None
    fd_used: int | None
    fd_total: int | None
    proc_used: int | None
    proc_total: int | None
    mem_used: int | None
    mem_limit: int | None
    mem_alarm: bool
    disk_free: int | None
    disk_free_limit: int | None
    disk_alarm: bool
    #: Queues of the whole broker (every vhost).
    queues: int | None
    #: Epoch seconds of the reading.
    time: float
    #: Every node of the cluster (one for a single broker).
    nodes: tuple[NodeHealth, ...] = ()


def _count(value: Any) -> int | None:
    """A figure the API gave, or None when it is missing or not a number (hostile input)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value >= 0 else None


def _free(used: int | None, total: int | None) -> float:
    return float("inf") if used is None or total is None else float(total - used)


def is_pool_connection(pool: str, connection_name: Any) -> bool:
    """A connection of the pool's controller (`osrdyne P ...`) or of one of its workers
    (`worker ID (P)`), by the name osrdyne gives it."""
    if not isinstance(connection_name, str):
        return False
    return connection_name.startswith(f"osrdyne {pool} ") or (
        connection_name.startswith("worker ") and connection_name.endswith(f" ({pool})")
    )


def nodes_of(
    nodes: Sequence[Mapping[str, Any]],
    connections: Sequence[Mapping[str, Any]] | None,
    *,
    pool: str,
) -> tuple[NodeHealth, ...]:
    """Each node's health and the pool's connections on it (pure: tested without a broker).
    `connections` None: they could not be read (counts unknown)."""
    counts: dict[str, int] = {}
    for c in connections or ():
        properties = c.get("client_properties")
        name = properties.get("connection_name") if isinstance(properties, Mapping) else None
        node = c.get("node")
        if isinstance(node, str) and is_pool_connection(pool, name):
            counts[node] = counts.get(node, 0) + 1
    found: list[NodeHealth] = []
    for n in nodes:
        name = n.get("name")
        if not isinstance(name, str):
            continue
        partitions = n.get("partitions")
        found.append(
            NodeHealth(
                name=name,
                running=n.get("running") is not False,
                partitions=tuple(p for p in partitions if isinstance(p, str))
                if isinstance(partitions, list)
                else (),
                mem_alarm=n.get("mem_alarm") is True,
                disk_alarm=n.get("disk_free_alarm") is True,
                pool_connections=None if connections is None else counts.get(name, 0),
            )
        )
    return tuple(sorted(found, key=lambda h: h.name))


def figures_of(
    nodes: Sequence[Mapping[str, Any]],
    overview: Mapping[str, Any],
    *,
    at: float,
    health: tuple[NodeHealth, ...] = (),
) -> BrokerFigures:
    """The figures of `/api/nodes` and `/api/overview` answers (pure: tested without a broker)."""
    running = [n for n in nodes if isinstance(n, Mapping) and n.get("running", True) is not False]
    tightest: Mapping[str, Any] = min(
        running,
        key=lambda n: (
            _free(_count(n.get("fd_used")), _count(n.get("fd_total"))),
            _free(_count(n.get("proc_used")), _count(n.get("proc_total"))),
        ),
        default={},
    )
    totals = overview.get("object_totals")
    queues = _count(totals.get("queues")) if isinstance(totals, Mapping) else None
    name = tightest.get("name")
    return BrokerFigures(
        node=name if isinstance(name, str) else None,
        fd_used=_count(tightest.get("fd_used")),
        fd_total=_count(tightest.get("fd_total")),
        proc_used=_count(tightest.get("proc_used")),
        proc_total=_count(tightest.get("proc_total")),
        mem_used=_count(tightest.get("mem_used")),
        mem_limit=_count(tightest.get("mem_limit")),
        mem_alarm=any(n.get("mem_alarm") is True for n in running),
        disk_free=_count(tightest.get("disk_free")),
        disk_free_limit=_count(tightest.get("disk_free_limit")),
        disk_alarm=any(n.get("disk_free_alarm") is True for n in running),
        queues=queues,
        time=at,
        nodes=health,
    )


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
