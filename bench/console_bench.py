"""The console with a small pool and a big one, side by side: does it stay usable?

One run, two pools on the local broker, each with a controller (the in-memory driver: queues
only; classic queues: cheap to create) whose groups are made by orphans (keys published
without `reply_to`, so nobody waits), its HTTP API, and the console open in headless Chromium.
For each pool it measures, in the browser, what an operator waits for:

- `poll`: one status poll as the pool page makes it (`/status?limit=100&offset=0&sort=key`),
  fetched and parsed; `whole`: the whole document, for comparison (what the console fetched
  before the controller paged it);
- `sort`: a click on a column title until the table shows the controller's new order;
- `page`: a click on *next* until the second page is drawn;
- `filter`: a key typed in *Filter by key* until the table shows it, less the 250 ms the
  filter waits for typing to pause;

the median of `--repeat` tries each, and the ratio big/small. Run from the repository root:

    PYTHONPATH=. .venv/bin/python bench/console_bench.py [--small 200] [--big 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aio_pika
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from drivers.memory import MemoryDriver
from osrdyne.controller import Controller, Settings
from osrdyne.ops import ApiServer, make_app
from tests import broker
from tests.console.browser import chromium

#: One poll as the console makes it on the pool page (a page of 100 groups), fetched and
#: parsed; with `whole`, the whole document (what the console fetched before it asked for
#: pages, and what a script reading every group gets).
STATUS = """
const [whole, done] = arguments;
const t = performance.now();
fetch(whole ? '/status' : '/status?limit=100&offset=0&sort=key', {headers: {}})
  .then(r => r.json()).then(d => done([performance.now() - t, JSON.stringify(d).length]));
"""
#: A user's action until the table shows its result (its first row is `expected`): the
#: controller asked, the answer parsed and the rows drawn. `kind` is `click` (a column
#: title, the pager) or `type` (the key filter, which asks once typing pauses: the pause is
#: part of what the user waits). The console's own polls redraw the table too: only the
#: expected first row ends the wait.
ACTION = """
const [kind, css, text, expected, done] = arguments;
const table = document.getElementById('groups');
const first = () => {
  const cell = table.querySelector('tbody tr.group td.key');
  return cell ? cell.textContent : null;
};
const t = performance.now();
const seen = new MutationObserver(() => {
  if (first() === expected) { seen.disconnect(); done(performance.now() - t); }
});
seen.observe(table, {childList: true, subtree: true});
if (kind === 'click') document.querySelector(css).click();
else {
  const input = document.querySelector(css);
  input.value = text;
  input.dispatchEvent(new Event('input'));
}
"""
#: What the key filter waits after the last keystroke before asking (views.js FILTER_PAUSE).
FILTER_PAUSE_MS = 250


def key(n: int) -> str:
    return f"dataset-{n:05d}"


async def make_groups(pool: str, count: int) -> None:
    connection = await aio_pika.connect(broker.AMQP_URL)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{pool}-req-xchg", ensure=False)
        for n in range(count):
            await exchange.publish(aio_pika.Message(b""), routing_key=key(n))


def measure(base: str, count: int, repeat: int) -> dict[str, Any]:
    if count <= 100:
        raise SystemExit(f"a pool of {count} groups has one page: paging is not measured")
    with chromium() as browser:
        browser.set_script_timeout(120)
        browser.get(f"{base}/console/")
        WebDriverWait(browser, 300).until(
            lambda b: b.find_element(By.ID, "group-count").text.startswith(f"{count:,}")
        )

        def action(kind: str, css: str, expected: str, text: str = "") -> float:
            return float(browser.execute_async_script(ACTION, kind, css, text, expected))

        results: dict[str, list[float]] = {
            name: [] for name in ("poll", "whole", "sort", "page", "filter")
        }
        size = whole_size = 0
        column = 'th[data-column="key"]'
        for n in range(repeat):
            took, size = browser.execute_async_script(STATUS, False)
            results["poll"].append(took)
            took, whole_size = browser.execute_async_script(STATUS, True)
            results["whole"].append(took)
            # Z to A, then back: each click asks the controller for the other order.
            results["sort"].append(action("click", column, key(count - 1)))
            results["sort"].append(action("click", column, key(0)))
            results["page"].append(action("click", ".pager button:last-child", key(100)))
            wanted = key((37 * n + 11) % count)
            typed = action("type", "#filter", wanted, wanted)
            results["filter"].append(typed - FILTER_PAUSE_MS)
            action("type", "#filter", key(0))  # cleared: the first page again
        rows = len(browser.find_elements(By.CSS_SELECTOR, "tr.group"))
    return {
        "groups": count,
        "rows drawn": rows,
        "poll bytes": size,
        "whole bytes": whole_size,
        **{name: statistics.median(values) for name, values in results.items()},
    }


async def run_pool(count: int, repeat: int, workdir: Path) -> dict[str, Any]:
    pool = f"console-bench-{uuid.uuid4().hex[:6]}"
    settings = Settings(
        pool=pool,
        amqp={"url": broker.AMQP_URL, "management_url": broker.MANAGEMENT_URL},
        groups={
            "unbind_delay": 3600,
            "stop_delay": 3600,
            "loop_interval": 5,
            "max_groups": None,
            "orphan_wait_timeout": 120,
        },
        queues={"type": "classic"},
        # Classic queues hold no file open; the open-files guard's default (3.5 a queue, set
        # by quorum queues) would refuse keys long before 10,000 on a 20,000-file broker.
        broker={"fds_per_queue": 1.0},
        api={"enabled": False},
        driver={"kind": "noop"},
    )
    # The in-memory driver: groups cost nothing, but it lists what it started, as a real
    # driver does (the noop driver lists nothing: every pass would start every group again).
    controller = Controller(settings, driver=MemoryDriver())
    server = ApiServer(make_app(controller), host="127.0.0.1", port=0)
    await server.start()
    task = asyncio.create_task(controller.run(), name="controller")
    try:
        await asyncio.wait_for(controller.wait_leader(), 60)
        began = time.monotonic()
        await make_groups(pool, count)
        while controller.status().generations is None or len(controller.status().groups) < count:
            await asyncio.sleep(0.5)
        print(f"{count} groups made in {time.monotonic() - began:.1f}s", file=sys.stderr)
        return await asyncio.to_thread(measure, server.url, count, repeat)
    finally:
        controller.stop()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(task, 120)
        await server.stop()
        await broker.delete_pool_objects(pool)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        small = await run_pool(args.small, args.repeat, Path(workdir))
        big = await run_pool(args.big, args.repeat, Path(workdir))
    unmeasured = [name for row in (small, big) for name, v in row.items() if v != v]  # nan
    if unmeasured:
        raise SystemExit(f"not measured: {unmeasured}")
    print(f"{'':14}{'small':>12}{'big':>12}{'big/small':>12}")
    for name in small:
        ratio = big[name] / small[name] if small[name] else float("nan")
        unit = " ms" if name in ("poll", "whole", "sort", "page", "filter") else ""
        print(f"{name + unit:14}{small[name]:>12.1f}{big[name]:>12.1f}{ratio:>11.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200, help="groups of the small pool")
    parser.add_argument("--big", type=int, default=2000, help="groups of the big pool")
    parser.add_argument("--repeat", type=int, default=15, help="tries of each measure")
    asyncio.run(main(parser.parse_args()))
