"""A driver that cannot list its groups (noop): each group is started once, not every pass.

A real controller on the real broker with the noop driver: the worker-group loop runs many
passes (a short `loop_interval`), and the start of each key is asked of the driver, and
logged, once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest

from drivers.base import Unlisted
from drivers.noop import NoopDriver
from tests.conftest import Running
from tests.waiting import eventually

KEYS = ("k-1", "k-2", "k-3")


def _sample(running: Running, name: str, labels: dict[str, str]) -> float:
    registry = running.controller.metrics.registry
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_noop_group_is_started_once_over_many_passes(
    pool: str,
    make_controller: Callable[..., Awaitable[Running]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="osrdyne.controller._effects.group_loop")
    running = await make_controller(pool, driver={"kind": "noop"}, groups={"loop_interval": 0.05})
    assert isinstance(running.controller.driver, NoopDriver)
    assert isinstance(running.controller.driver, Unlisted)
    session = running.controller.leading()
    for key in KEYS:
        session.warm(key, by="test")
    await eventually(lambda: session.group_loop.running >= set(KEYS), what="groups started")

    def passes() -> float:
        return _sample(running, "osrdyne_control_loop_iteration_seconds_count", {"loop": "groups"})

    seen = passes()
    await eventually(lambda: passes() >= seen + 20, what="20 more passes of the group loop")

    starts = [r for r in caplog.records if r.getMessage().endswith(": start")]
    assert sorted(r.getMessage() for r in starts) == [
        f"worker group {key!r}: start" for key in KEYS
    ]
    calls = _sample(running, "osrdyne_driver_calls_total", {"op": "start", "outcome": "ok"})
    assert calls == len(KEYS)
    # Nothing was listed: the loop's own record stands for the driver's listing.
    assert _sample(running, "osrdyne_driver_calls_total", {"op": "list", "outcome": "ok"}) == 0
