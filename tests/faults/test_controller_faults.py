"""Controllers dying and competing, for real: `python -m osrdyne run` processes SIGKILLed in the
middle of a burst of new keys, and two controllers of one pool running at once."""

from __future__ import annotations

import asyncio
import collections
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from osrdyne import Status
from tests import broker
from tests.faults.conftest import Caller, ControllerProcess, process_settings, workers_of
from tests.faults.rabbit_node import free_port
from tests.faults.report import Tally
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(240)

KEYS = 20
PER_KEY = 5
#: How long a controller process gets to declare its pool: its imports alone took 40 s (1.6 s
#: of CPU) at a load average of 27 on the 2-core machine (2026-12-02).
START = 120.0


def one_worker_per_key(pool: str) -> dict[str, int]:
    return dict(collections.Counter(workers_of(pool).values()))


async def burst(caller: Caller, pool: str, prefix: str) -> list[str]:
    """KEYS new keys, PER_KEY requests each, interleaved: all orphans at first."""
    return [
        await caller.send(pool, f"{prefix}-{k}", f"{prefix}-{k}-{i}".encode())
        for i in range(PER_KEY)
        for k in range(KEYS)
    ]


@pytest.mark.slow
async def test_controller_sigkilled_during_a_burst_of_orphans(
    pool: str,
    tmp_path: Path,
    start_controller_process: Callable[[dict[str, Any]], ControllerProcess],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    tally = make_tally(
        f"controller SIGKILLed during a burst ({KEYS} new keys x {PER_KEY})",
        "unacked orphans are redelivered to the next controller; one republished but not yet "
        "acked is forwarded twice (at least once)",
    )
    settings = process_settings(pool, tmp_path / "workers")
    first = start_controller_process(settings)
    await eventually(lambda: broker.pool_declared(pool), what="pool declared", timeout=START)
    caller = await make_caller(tally)
    sent = await burst(caller, pool, "burst")
    await eventually(lambda: len(workers_of(pool)) >= 1, what="a group started", timeout=60)
    tally.extra["groups up at kill"] = len(workers_of(pool))
    first.kill()
    start_controller_process(settings)
    assert not await caller.settle(150, grace=2)
    assert caller.statuses(sent) == {Status.OK: KEYS * PER_KEY}
    groups = one_worker_per_key(pool)
    assert groups == {f"burst-{k}": 1 for k in range(KEYS)}, groups


async def role_of(port: int) -> str | None:
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            return str((await http.get(f"http://127.0.0.1:{port}/status")).json()["role"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


@pytest.mark.slow
async def test_two_controllers_at_once_one_leads_and_the_standby_takes_over(
    pool: str,
    tmp_path: Path,
    start_controller_process: Callable[[dict[str, Any]], ControllerProcess],
    make_caller: Callable[..., Awaitable[Caller]],
    make_tally: Callable[..., Tally],
) -> None:
    """Two controllers of one pool started together during a burst of new keys: one leads,
    the other stands by; every request answered once, one worker per key; then the leader is
    SIGKILLed and the standby leads and serves new keys.

    Once (2026-11-27, a loaded clean-clone run) 2 of 100 requests were counted lost here. Not
    seen again in 16 runs at load averages of 15 to 44 (2026-12-02, scripts and commands in
    docs/reliability.md); the caller then took its answers by direct reply-to, which loses an
    answer in flight whenever the caller's channel is lost (at most once, by design), and this
    test could not tell that from a loss. Its answers now go to a durable queue, so an
    unanswered request here is a real loss, and `explain` names where its key stood."""
    tally = make_tally(
        f"two controllers at once during a burst ({KEYS} keys x {PER_KEY}), then leader killed",
        "one leads (exclusive P-leader queue); the standby takes over and serves new keys",
    )
    ports = [free_port(), free_port()]
    controllers = [
        start_controller_process(
            process_settings(pool, tmp_path / "workers", api={"enabled": True, "port": port})
        )
        for port in ports
    ]
    await eventually(lambda: broker.pool_declared(pool), what="pool declared", timeout=START)
    # Answers to a durable queue: a direct reply-to answer is lost by design when the
    # caller's channel is (at most once), which this test could not tell from a loss.
    caller = await make_caller(tally, reply_queue=f"{pool}-replies")
    sent = await burst(caller, pool, "both")

    async def roles() -> list[str | None]:
        return list(await asyncio.gather(*(role_of(p) for p in ports)))

    found = await eventually(
        lambda: _when(roles(), lambda r: sorted(map(str, r)) == ["leader", "standby"]),
        what="one leader, one standby",
        timeout=60,
    )
    unanswered = await caller.settle(150, grace=2)
    assert not unanswered, explain(caller, unanswered, controllers)
    assert caller.statuses(sent) == {Status.OK: KEYS * PER_KEY}
    assert one_worker_per_key(pool) == {f"both-{k}": 1 for k in range(KEYS)}
    assert sorted(map(str, await roles())) == ["leader", "standby"]  # still exactly one

    leader = found.index("leader")
    controllers[leader].kill()
    standby = ports[1 - leader]
    await eventually(
        lambda: _when(role_of(standby), lambda r: r == "leader"),
        what="the standby leads",
        timeout=60,
    )
    after = [await caller.send(pool, f"after-{k}", b"x") for k in range(3)]
    assert not await caller.settle(90)
    assert caller.statuses(after) == {Status.OK: 3}


def explain(caller: Caller, unanswered: list[str], controllers: list[ControllerProcess]) -> str:
    """The unanswered requests' keys, and what each controller's log says of those keys (its
    last lines naming them)."""
    described = caller.describe(unanswered)
    keys = sorted({str(key) for key, _ in described})
    named = re.compile("|".join(rf"{re.escape(key)}(?![\w-])" for key in keys))
    lines = [f"{len(unanswered)} unanswered: (key, connection epoch) {described}"]
    for n, controller in enumerate(controllers):
        text = controller.log.read_text(errors="replace").splitlines()
        naming = [line for line in text if named.search(line)]
        lines.append(f"controller {n} (alive: {controller.alive()}), {len(naming)} line(s):")
        lines += [f"  {line[:300]}" for line in naming[-20:]]
    return "\n".join(lines)


async def _when(awaitable: Awaitable[Any], test: Callable[[Any], bool]) -> Any:
    value = await awaitable
    return value if test(value) else None
