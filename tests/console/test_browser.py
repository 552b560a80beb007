"""The console in a real browser (headless Chromium) against a real controller with real
worker processes: the page lists groups as keys are called, a warm action starts a group
that then answers through the fast path, a stop action stops one, and keys full of HTML,
script and invisible characters render as text."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable

import aio_pika
import pytest

from osrdyne import Client
from tests import broker
from tests.conftest import Running
from tests.console.conftest import Page, Serve
from tests.scaling.hot_key import SCALING, WORKER_ENV
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

TOKEN = "console-s3cret"
MakeController = Callable[..., Awaitable[Running]]


def row(key: str) -> str:
    """CSS for the groups table's row of `key` (keys quoted as CSS strings)."""
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'tr.group[data-key="{quoted}"]'


async def test_the_page_lists_groups_as_keys_are_called(
    make_controller: MakeController, serve: Serve, page: Page, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    base = await serve(running, token=TOKEN)
    await page.sign_in(base, TOKEN)
    await page.wait_for("#groups td.empty", what="the empty table")
    assert await page.count("#no-token") == 0  # a token is set: no warning

    for key in ("alpha", "beta"):
        assert (await client.call(pool, key, b"x", timeout=60)).ok
        await page.wait_for(f"{row(key)} .badge.active", what=f"{key} listed as active")
    assert await page.texts("tr.group td.key") == ["alpha", "beta"]

    async def consuming() -> bool:
        cells = await page.texts(f"{row('alpha')} td")
        return len(cells) > 7 and cells[7] == "1"  # the Consumers column

    await eventually(consuming, what="alpha's worker shown consuming")
    await page.wait_for("#cold-starts svg rect.bar", what="the cold starts drawn")
    await page.type("#filter", "BET")  # asked of the controller once typing pauses, any case

    async def filtered() -> bool:
        return await page.texts("tr.group td.key") == ["beta"]

    await eventually(filtered, what="the filter applied")
    assert (await page.texts("#group-count"))[0] == "1 of 2 group(s)"
    await page.wait_for("#pool-cards .badge.leader", what="the leader badge")
    assert await page.errors() == []


async def test_warm_in_the_page_starts_a_group_that_answers_through_the_fast_path(
    make_controller: MakeController, serve: Serve, page: Page, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    base = await serve(running, token=TOKEN)
    await page.sign_in(base, TOKEN)
    await page.type("#warm-key", "warmed")
    await page.click("#warm-button")
    await page.wait_for(".toast.ok", what="the warm's answer")
    await page.wait_for(f"{row('warmed')} .badge.active", what="the warmed group listed")
    session = running.controller.session
    assert session is not None

    async def consumed() -> bool:
        doc = await running.controller.report()
        group = doc.groups.get("warmed")
        return group is not None and (group.consumers or 0) > 0

    await eventually(consumed, what="a worker of the warmed group consumes its queue")
    assert (await client.call(pool, "warmed", b"hot", timeout=60)).body == b"hot"
    # The request went straight to the warm queue: no orphan was needed.
    metrics = running.controller.metrics
    assert metrics.orphans.labels("forwarded")._value.get() == 0
    kinds = [e.kind.value for e in running.controller.history.events("warmed")]
    assert kinds[:2] == ["warm", "required"] and "group_started" in kinds


async def test_stop_in_the_page_stops_a_group(
    make_controller: MakeController, serve: Serve, page: Page, client: Client, pool: str
) -> None:
    running = await make_controller(pool, groups={"stop_drain": 0.5})
    base = await serve(running, token=TOKEN)
    assert (await client.call(pool, "doomed", b"x", timeout=60)).ok

    async def counted() -> bool:
        # The queue loop deletes only a queue the broker can count; a queue younger than its
        # statistics interval cannot be yet, and would bring the group back (nothing lost).
        queue = await broker.request_queue(pool, "doomed")
        return queue is not None and isinstance(queue.get("messages"), int)

    await eventually(counted, what="the broker counting the queue of doomed")
    await page.sign_in(base, TOKEN)
    await page.open(f"{base}/console/#/key/doomed")
    await page.wait_for("#key-title", what="the key's page")
    await page.wait_for(".key-head .badge.active", what="the group active on its page")
    await page.click("#stop-button")  # arms it
    assert (await page.texts("#stop-button")) == ["Confirm stop"]
    await page.click("#stop-button")

    async def stopped() -> bool:
        return "doomed" not in await running.controller.driver.list()

    await eventually(stopped, what="the driver stopped the group")
    await page.wait_for(".key-head .badge.none", what="the page saying the key has no group")
    await page.wait_for("#timeline li.stopped", what="the stop in the timeline")
    timeline = " ".join(await page.texts("#timeline li"))
    assert "asked by client=127.0.0.1 token=sha256:" in timeline
    assert TOKEN not in timeline


HOSTILE = [
    '<img src=x onerror="window.__pwned=1">',
    "<script>window.__pwned=2</script>",
    "evil\u202etxt.exe",  # a right-to-left override: valid in a key, shown escaped
]


async def test_hostile_keys_render_as_text(
    make_controller: MakeController, serve: Serve, page: Page, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    base = await serve(running, token=TOKEN)
    for key in HOSTILE:
        assert (await client.call(pool, key, b"x", timeout=60)).ok
    # A key with control characters cannot have a group; sent without reply_to, it is kept
    # as a poison entry, which the console lists too.
    connection = await aio_pika.connect(running.controller.settings.amqp.url[0])
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{pool}-req-xchg", ensure=False)
        await exchange.publish(aio_pika.Message(b"?"), routing_key="bad\x1b[31mkey")
    await page.sign_in(base, TOKEN)
    await page.wait_for(row(HOSTILE[0]), what="the hostile keys listed")

    async def listed() -> list[str] | None:
        keys = sorted(await page.texts("tr.group td.key"))
        return keys if len(keys) == 3 else None

    shown = await eventually(listed, what="three hostile keys listed")
    assert shown == sorted([HOSTILE[0], HOSTILE[1], "evil\\u202etxt.exe"])
    assert await page.count("#groups img, #groups script") == 0
    assert await page.js("return window.__pwned === undefined") is True

    await page.click("#poison-toggle")
    await page.wait_for("#poison-list tr[data-entry]", what="the poison entry listed")
    assert "bad\\x1b[31mkey" in await page.texts("#poison-list td.key")

    await page.open(f"{base}/console/#/key/" + _quote(HOSTILE[1]))
    await page.wait_for("#timeline li.event", what="the hostile key's timeline")
    assert await page.texts("#key-title") == [HOSTILE[1]]
    assert await page.js("return window.__pwned === undefined") is True
    assert await page.errors() == []


async def test_the_page_wants_the_token_or_warns_there_is_none(
    make_controller: MakeController, serve: Serve, page: Page, pool: str
) -> None:
    running = await make_controller(pool)
    guarded = await serve(running, token=TOKEN)
    await page.open(f"{guarded}/console/")
    await page.wait_for("#token", what="the sign-in form")
    await page.type("#token", "wrong")
    await page.click("#sign-in button")
    await page.wait_for("#sign-in .error", what="the wrong token refused")
    assert await page.count("#groups") == 0

    open_ = await serve(running)
    await page.open(f"{open_}/console/")
    await page.wait_for("#no-token", what="the warning that no token is set")
    await page.wait_for("#groups", what="the table without signing in")


async def test_a_big_pool_is_paged_and_sorted_by_the_controller(
    make_controller: MakeController, serve: Serve, page: Page, pool: str
) -> None:
    """120 groups (noop driver, made by orphans sent without `reply_to`): the page shows
    100 of them in the controller's order, integer-like keys included (a browser would list
    those first from a JSON object), the next page the other 20, and a click on a column
    asks the controller for that order."""
    running = await make_controller(pool, driver={"kind": "noop"})
    base = await serve(running, token=TOKEN)
    keys = [f"k{i:03d}" for i in range(117)] + ["7", "10", "200"]
    connection = await aio_pika.connect(running.controller.settings.amqp.url[0])
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{pool}-req-xchg", ensure=False)
        for key in keys:
            await exchange.publish(aio_pika.Message(b"x"), routing_key=key)
    await page.sign_in(base, TOKEN)

    async def counted() -> bool:
        return (await page.texts("#group-count")) == ["120 group(s)"]

    await eventually(counted, what="120 groups counted", timeout=60)
    shown = await page.texts("tr.group td.key")
    assert shown == sorted(keys)[:100]  # "10", "200", "7", "k000"...: the controller's order
    assert " 1–100 of 120 " in await page.texts(".pager span")
    await page.click(".pager button:last-child")

    async def second_page() -> list[str] | None:
        rows = await page.texts("tr.group td.key")
        return rows if rows and rows[0] != shown[0] else None

    assert await eventually(second_page, what="the second page") == sorted(keys)[100:]
    await page.click('th[data-column="key"]')  # again: the other way round

    async def reversed_() -> bool:
        rows = await page.texts("tr.group td.key")
        return rows[:3] == ["k116", "k115", "k114"]

    await eventually(reversed_, what="the keys from Z to A")
    assert await page.errors() == []


async def test_a_scaled_group_shows_the_scaler_s_figures(
    make_controller: MakeController, serve: Serve, page: Page, client: Client, pool: str
) -> None:
    """A hot key under load grown to its maximum (3 workers, subprocess driver): its page
    shows the group scaler's view (workers running and wanted, the reason, the backlog,
    arrival and service rates, the busy share), its row the three workers."""
    running = await make_controller(
        pool,
        scaling={**SCALING, "max_workers": 3},
        driver={"subprocess": {"env": WORKER_ENV}},
    )
    base = await serve(running, token=TOKEN)
    driver = running.controller.driver
    load_on = True

    async def caller() -> None:
        while load_on:
            assert (await client.call(pool, "hot", b"x", timeout=120)).ok

    callers = [asyncio.create_task(caller()) for _ in range(12)]
    try:
        await eventually(lambda: driver.sizes().get("hot") == 3, what="hot grown to 3")
        await page.sign_in(base, TOKEN)
        await page.open(f"{base}/console/#/key/hot")

        async def figures() -> dict[str, str] | None:
            names = await page.texts("#key-scaling dt")
            shown = dict(zip(names, await page.texts("#key-scaling dd"), strict=False))
            wanted = shown.get("workers") == "3 running, 3 wanted"
            return shown if wanted and shown.get("arrivals", "–") != "–" else None

        shown = await eventually(figures, what="the scaler's figures of hot")
        assert shown["reason"] and shown["service"].endswith("/s a worker")
        assert shown["busy"].endswith(" %") and shown["saturated"] in ("no", "saturated")
        await page.open(f"{base}/console/#/")

        async def three_workers() -> bool:
            cells = await page.texts(f"{row('hot')} td")
            return len(cells) > 3 and cells[3].count("pid ") == 3

        await eventually(three_workers, what="hot's row listing its three workers")
    finally:
        load_on = False
        assert [r for r in await asyncio.gather(*callers, return_exceptions=True) if r] == []
    assert await page.errors() == []


def _quote(key: str) -> str:
    return urllib.parse.quote(key, safe="")
