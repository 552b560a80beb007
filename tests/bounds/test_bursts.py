"""Bursts at the broker's pace: a burst of 1000 new keys is forwarded in full (every request in
its new queue, none lost or answered `overloaded` under the default caps), and a controller
process that gets SIGTERM in the middle of a burst exits within its grace with every request
either forwarded or still in the orphan queue. Real broker, noop driver (no workers: the
requests stay in their queues, where they are counted), classic queues (cheap for the shared
broker)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from osrdyne.wire import PoolNames
from tests import broker
from tests.conftest import Running, raw_connection, settings_dict
from tests.faults.conftest import ControllerProcess
from tests.waiting import eventually

MakeController = Callable[..., Awaitable[Running]]


async def publish_burst(pool: str, keys: list[str]) -> None:
    """One request per key, published as fast as the broker confirms."""
    async with raw_connection(broker.AMQP_URL) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange, ensure=False)
        await asyncio.gather(
            *(
                exchange.publish(aio_pika.Message(key.encode()), routing_key=key, mandatory=True)
                for key in keys
            )
        )


async def messages_by_queue(pool: str) -> dict[str, int]:
    """Messages of every queue of `pool` the management API counts (a few seconds late)."""
    async with broker.management() as http:
        found: dict[str, int] = {}
        page = 1
        while True:
            response = await http.get(
                "/queues/%2F",
                params={"name": f"^{pool}-", "use_regex": "true", "page": page,
                        "page_size": 500, "columns": "name,messages"},
            )  # fmt: skip
            response.raise_for_status()
            doc = response.json()
            found.update({q["name"]: int(q.get("messages") or 0) for q in doc["items"]})
            if page >= doc.get("page_count", 1):
                return found
            page += 1


@pytest.mark.slow
# Its own waits (forwarded within 300 s, then in their queues within 120 s, both generous for a
# loaded machine) fit in its time limit; pytest-timeout's 180 s ended it first at load 20.
@pytest.mark.timeout(600)
async def test_a_burst_of_1000_new_keys_is_forwarded_in_full(
    pool: str,
    make_controller: MakeController,
) -> None:
    running = await make_controller(
        pool, driver={"kind": "noop"}, queues={"type": "classic"}, groups={"loop_interval": 5}
    )
    admission = running.controller.status().admission
    assert admission is not None and admission.broker_room is not None
    if admission.broker_room < 1000:  # e.g. a broker left at 1024 open files
        pytest.skip(f"the broker has room for {admission.broker_room} new queues, not 1000")
    keys = [f"k{i:04d}" for i in range(1000)]
    await publish_burst(pool, keys)
    orphans = running.controller.metrics.orphans
    await eventually(
        lambda: orphans.labels("forwarded")._value.get() >= 1000, timeout=300, what="forwarded"
    )
    assert orphans.labels("overloaded")._value.get() == 0
    names = PoolNames(pool)

    async def every_request_in_its_queue() -> bool:
        queues = await messages_by_queue(pool)
        return all(queues.get(names.request_queue(k)) == 1 for k in keys)

    await eventually(every_request_in_its_queue, timeout=120, interval=2, what="all in queues")
    doc = running.controller.status()
    assert doc.admission is not None and doc.admission.groups == 1000


@pytest.mark.slow
async def test_sigterm_mid_burst_exits_within_grace_and_loses_nothing(
    pool: str, tmp_path: Path
) -> None:
    grace = 3.0
    settings = settings_dict(
        pool,
        tmp_path / "workers",
        driver={"kind": "noop"},
        queues={"type": "classic"},
        amqp={"stop_grace": grace},
    )
    config = tmp_path / "osrdyne.toml"
    from tests.faults.conftest import to_toml

    config.write_text(to_toml(settings))
    process = ControllerProcess(config, tmp_path / "controller.log")
    try:
        await eventually(lambda: broker.pool_declared(pool), timeout=60, what="pool declared")
        await eventually(lambda: _leads(pool), timeout=60, what="leading")
        keys = [f"s{i:03d}" for i in range(300)]
        await publish_burst(pool, keys)
        await eventually(
            lambda: _some_request_queues(pool), timeout=60, interval=0.05, what="mid-burst"
        )
        process.process.send_signal(signal.SIGTERM)
        # A bound on top of the grace (the interpreter's start-up and exit), not a speed.
        code = await asyncio.to_thread(process.process.wait, grace + 20)
        assert code == 0, Path(process.log).read_text()[-3000:]
    except subprocess.TimeoutExpired:
        raise AssertionError("the controller did not exit within its grace") from None
    finally:
        process.terminate()
    names = PoolNames(pool)

    seen: dict[str, Any] = {}

    async def all_counted() -> Any:
        queues = await messages_by_queue(pool)
        forwarded = sum(1 for k in keys if queues.get(names.request_queue(k)))
        waiting = queues.get(names.orphan_queue, 0)
        refused = queues.get(names.poison_queue, 0)  # overloaded, no reply_to: kept as poison
        seen.update(forwarded=forwarded, waiting=waiting, refused=refused)
        return forwarded + waiting + refused >= len(keys)

    try:
        await eventually(all_counted, timeout=60, interval=2, what="counted")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: last count {seen}") from None
    # Key by key: each request is in its key's queue or still an orphan (a count alone cannot
    # tell a loss plus a duplicate from neither). A request in both is a duplicate, not a
    # loss: forwarded and confirmed, its orphan's ack not through before the connection
    # closed (at-least-once; once in CI, under load). Said, not failed.
    # Both read from the broker itself, not from the management statistics (they lag up to
    # 5 s: a CI run once counted 35 requests forwarded since as still orphans, then missed
    # them in both places).
    waiting_keys = await _take_all(names.orphan_queue)
    in_queues = await _keys_with_requests(pool, keys)
    # It was mid-burst: some forwarded, the rest wait for the next leader. Counted from the
    # broker itself: the management statistics above (up to 5 s late) once said 0 forwarded
    # of queues that held their requests.
    assert in_queues, f"nothing forwarded before the SIGTERM: {seen}"
    lost = set(keys) - in_queues - set(waiting_keys)
    assert len(lost) <= seen["refused"], f"lost: {sorted(lost)[:10]}, {seen}"
    duplicates = in_queues & set(waiting_keys)
    if duplicates:
        print(f"BURST {len(duplicates)} request(s) forwarded and still an orphan: {duplicates}")


async def _take_all(queue_name: str) -> list[str]:
    """The bodies (keys) of every message in `queue_name`, taken (the test ends with them)."""
    bodies = []
    async with raw_connection(broker.AMQP_URL) as connection:
        channel = await connection.channel()
        queue = await channel.get_queue(queue_name, ensure=False)
        while (message := await queue.get(no_ack=True, fail=False, timeout=30)) is not None:
            bodies.append(message.body.decode())
    return bodies


async def _keys_with_requests(pool: str, keys: list[str]) -> set[str]:
    """The keys whose request queue holds a message now (a passive declaration's count)."""
    names = PoolNames(pool)
    ready = await broker.ready_messages(*(names.request_queue(k) for k in keys))
    return {k for k in keys if ready.get(names.request_queue(k))}


async def _leads(pool: str) -> bool:
    queue = PoolNames(pool).orphan_queue
    async with broker.management() as http:
        response = await http.get(f"/queues/%2F/{queue}")
    return response.status_code == 200 and bool(response.json().get("consumers"))


async def _some_request_queues(pool: str) -> bool:
    return len(await broker.request_queues(pool)) >= 10
