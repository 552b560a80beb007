"""What the management API's answers say of the broker's limits: pure, tested without a broker.

The reader (`broker_limits`) asks `/api/nodes`, `/api/overview` and `/api/connections`; these
functions turn the answers into figures. In a cluster the most constrained running node speaks
for the broker; an alarm on any node is an alarm. What a node does not report is None:
unknown, never a guessed zero (hostile input included: a figure that is not a number).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


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
