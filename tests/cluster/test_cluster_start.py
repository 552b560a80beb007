"""The cluster starts every time: `scripts/ensure_cluster.sh --stop`, then a start, five times
in a row, gives five clusters of three running nodes.

Seen once before the script started its nodes one after another (issue 32): node 1 exited with
`incompatible_feature_flags` (a `badmap` in `rabbit_feature_flags` sync) while the other two
booted, and the start failed. The script now stops node 1 last and starts it first, starts the
others next to it, and starts again a node whose VM exits while booting.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.cluster.conftest import NODES, Cluster
from tests.waiting import eventually

#: Opt-in (`scripts/test.sh --soak`): five stops and starts take about ten minutes (595 s on
#: 2026-11-27, five clusters of three nodes; docs/reliability.md). Every CI run starts the
#: cluster once anyway, with the same script.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(1800)]

STARTS = 5


async def clustered(cluster: Cluster) -> bool:
    """Three nodes running, each seeing the other two and no partition."""
    try:
        nodes = await cluster.api("/nodes", columns="name,running,partitions")
    except RuntimeError:
        return False
    return len(nodes) == len(NODES) and all(n["running"] and not n["partitions"] for n in nodes)


async def test_a_stopped_cluster_starts_five_times_in_a_row(cluster: Cluster) -> None:
    started = 0
    for _ in range(STARTS):
        await asyncio.to_thread(cluster._script, "--stop")
        await eventually(
            lambda: not any(cluster.up(n) for n in NODES), what="three nodes down", timeout=60
        )
        # The script's own exit status: it fails when a node does not boot or join.
        output = await asyncio.to_thread(cluster._script)
        assert "OSRDYNE_AMQP__URL=" in output
        assert all(cluster.up(n) for n in NODES)
        await eventually(lambda: clustered(cluster), what="three clustered nodes", timeout=120)
        started += 1
    assert started == STARTS
