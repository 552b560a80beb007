"""A controller killed with SIGKILL and started again adopts the queues and worker groups that
outlived it instead of duplicating them. Real processes: `python -m osrdyne run`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from osrdyne import Client
from tests import broker
from tests.faults.conftest import ControllerProcess, process_settings, workers_of
from tests.waiting import eventually


@pytest.mark.slow
async def test_sigkilled_controller_is_replaced_without_duplicate_groups(
    pool: str,
    client: Client,
    tmp_path: Path,
    start_controller_process: Callable[[dict[str, Any]], ControllerProcess],
) -> None:
    settings = process_settings(pool, tmp_path / "workers")
    first = start_controller_process(settings)  # the fixture stops what is left
    await eventually(lambda: broker.pool_declared(pool), what="pool declared")
    before = (await client.call(pool, "survivor", path="whoami", timeout=90)).json()
    first.kill()
    assert workers_of(pool) == {before["pid"]: "survivor"}  # the worker outlived it

    # Still served on the fast path while no controller runs at all.
    assert (await client.call(pool, "survivor", b"alone", timeout=30)).body == b"alone"

    second = start_controller_process(settings)
    after = (await client.call(pool, "survivor", path="whoami", timeout=90)).json()
    assert after["pid"] == before["pid"]
    assert (await client.call(pool, "newcomer", b"hi", timeout=90)).ok
    assert sorted(workers_of(pool).values()) == ["newcomer", "survivor"]
    second.terminate()
    await eventually(lambda: not workers_of(pool), what="workers ended with the controller")
