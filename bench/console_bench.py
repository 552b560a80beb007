"""The console with a small pool and a big one, side by side: does it stay usable?

One run, two pools on the local broker, each with a controller (noop driver: queues only,
classic queues: cheap to create) whose groups are made by orphans (invalid-free keys published
without `reply_to`, so nobody waits), its HTTP API, and the console open in headless Chromium.
For each pool it measures, in the browser, what an operator waits for:

- `status`: one poll: `fetch('/status')` and its JSON parsed (the document grows with the
  pool; the console polls less often when it takes long);
- `render`: drawing the groups table after a poll (only one page of 100 rows is drawn);
- `filter`: a keystroke in *Filter by key* until the table is redrawn;
- `sort`: a click on a column title until the table is redrawn;

the median of `--repeat` tries each, and the ratio big/small. Run from the repository root:

    PYTHONPATH=. .venv/bin/python bench/console_bench.py [--small 100] [--big 2000]
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

from osrdyne.controller import Controller, Settings
from osrdyne.ops import ApiServer, make_app
from tests import broker
from tests.console.browser import chromium

STATUS = """
const done = arguments[arguments.length - 1];
const t = performance.now();
fetch('/status').then(r => r.json()).then(d => done([performance.now() - t,
  JSON.stringify(d).length]));
"""
FILTER = """
const input = document.getElementById('filter');
const t = performance.now();
input.value = arguments[0];
input.dispatchEvent(new Event('input'));
const took = performance.now() - t;
input.value = '';
input.dispatchEvent(new Event('input'));
return took;
"""
SORT = """
const th = document.querySelector('#groups th[data-column="' + arguments[0] + '"]');
const t = performance.now();
th.click();
return performance.now() - t;
"""
RENDER = """
const input = document.getElementById('filter');
const t = performance.now();
input.dispatchEvent(new Event('input'));
return performance.now() - t;
"""


async def make_groups(pool: str, count: int) -> None:
    connection = await aio_pika.connect(broker.AMQP_URL)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{pool}-req-xchg", ensure=False)
        for n in range(count):
            await exchange.publish(aio_pika.Message(b""), routing_key=f"dataset-{n:05d}")


def measure(base: str, count: int, repeat: int) -> dict[str, Any]:
    with chromium() as browser:
        browser.set_script_timeout(120)
        browser.get(f"{base}/console/")
        WebDriverWait(browser, 300).until(
            lambda b: b.find_element(By.ID, "group-count").text.startswith(f"{count:,}")
        )
        results: dict[str, list[float]] = {"status": [], "render": [], "filter": [], "sort": []}
        size = 0
        for n in range(repeat):
            took, size = browser.execute_async_script(STATUS)
            results["status"].append(took)
            results["render"].append(browser.execute_script(RENDER))
            results["filter"].append(browser.execute_script(FILTER, f"{n % 10}{n % 7}"))
            results["sort"].append(browser.execute_script(SORT, ("since", "key")[n % 2]))
        rows = len(browser.find_elements(By.CSS_SELECTOR, "tr.group"))
    return {
        "groups": count,
        "rows drawn": rows,
        "status bytes": size,
        **{name: statistics.median(values) for name, values in results.items()},
    }


async def run_pool(count: int, repeat: int, workdir: Path) -> dict[str, Any]:
    pool = f"console-bench-{uuid.uuid4().hex[:6]}"
    settings = Settings(
        pool=pool,
        amqp={"url": broker.AMQP_URL, "management_url": broker.MANAGEMENT_URL},
        groups={"unbind_delay": 3600, "stop_delay": 3600, "loop_interval": 5},
        queues={"type": "classic"},
        api={"enabled": False},
        driver={"kind": "noop"},
    )
    controller = Controller(settings)
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
    print(f"{'':14}{'small':>12}{'big':>12}{'big/small':>12}")
    for name in small:
        ratio = big[name] / small[name] if small[name] else float("nan")
        unit = " ms" if name in ("status", "render", "filter", "sort") else ""
        print(f"{name + unit:14}{small[name]:>12.1f}{big[name]:>12.1f}{ratio:>11.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100, help="groups of the small pool")
    parser.add_argument("--big", type=int, default=2000, help="groups of the big pool")
    parser.add_argument("--repeat", type=int, default=15, help="tries of each measure")
    asyncio.run(main(parser.parse_args()))
