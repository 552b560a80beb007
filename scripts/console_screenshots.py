"""Screenshots of the operator console for docs/, made from a real pool so they stay current.

Starts a controller (subprocess driver, echo workers) on the local broker with its HTTP API
and a token, sends requests for a handful of keys (a hostile one among them: HTML and a
right-to-left override in its name), warms one, stops one, makes a dead letter and two poison
entries (a request that kept crashing its worker, and one with control characters in its
key), then opens the console in headless Chromium and saves:

    docs/console-pool.png   the pool: cards, charts, the groups table
    docs/console-key.png    one key: its group, timeline, dead letters and poison entries

Every broker object of the pool is deleted afterwards. Run from the repository root:

    PYTHONPATH=. .venv/bin/python scripts/console_screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import math
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aio_pika
import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from osrdyne import Client
from osrdyne.controller import Controller, Settings
from osrdyne.ops import ApiServer, make_app
from tests import broker
from tests.console.browser import chromium

TOKEN = "console-demo-token"
TRAFFIC_SECONDS = 90
KEYS = ["dataset=paris-2024", "dataset=lyon-2023", "model/rail-v3", "infra=42", "infra=43"]
HOSTILE = '<img src=x onerror="alert(1)">\u202egpj.exe'
WARMED = "infra=7"
STOPPED = "dataset=lyon-2023"
CRASHING = "infra=99"
BAD_KEY = "bad\x1b[31mkey"


def settings(pool: str, workers: Path) -> Settings:
    return Settings(
        pool=pool,
        amqp={"url": broker.AMQP_URL, "management_url": broker.MANAGEMENT_URL},
        groups={"unbind_delay": 600, "stop_delay": 600, "stop_drain": 600, "loop_interval": 1},
        queues={"delivery_limit": 2},
        api={"enabled": False},
        driver={
            "kind": "subprocess",
            "subprocess": {
                "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
                "env": {"WORKER_ACTIVITY_INTERVAL": "0.5"},
                "owner": str(workers),
                "stop_timeout": 5,
                "restart_backoff": 0.2,
            },
        },
    )


async def scenario(pool: str, api: httpx.AsyncClient) -> None:
    """Traffic that gives every part of the console something to show."""
    async with Client(broker.AMQP_URL, name="console screenshots") as client:
        for round_ in range(6):
            for key in [*KEYS, HOSTILE][: 2 + round_]:
                answer = await client.call(pool, key, b"hello", timeout=60)
                answer.raise_for_status()
        # A minute and a half of traffic in waves, a new key now and then (orphans), so the
        # chart of requests routed has something to show.
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < TRAFFIC_SECONDS:
            burst = 2 + int(6 * (1 + math.sin(elapsed / 9)))
            keys = [KEYS[n % len(KEYS)] for n in range(burst)]
            if int(elapsed) % 20 == 0:
                keys.append(f"tenant-{int(elapsed) // 20}")
            await asyncio.gather(*(client.call(pool, k, b"x", timeout=60) for k in keys))
            await asyncio.sleep(0.2)
        # A request that crashes its worker each time: dead-lettered at the delivery limit,
        # answered, kept as poison.
        crashed = await client.call(pool, CRASHING, b"boom", path="crash", timeout=120)
        logging.info("crashing request answered %s", crashed.status)
    # A request for a key that can never have a queue, without reply_to: kept as poison.
    connection = await aio_pika.connect(broker.AMQP_URL)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{pool}-req-xchg", ensure=False)
        await exchange.publish(aio_pika.Message(b"?"), routing_key=BAD_KEY)
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Osrdyne-Action": "screenshots"}
    for action, key in (("warm", WARMED), ("stop", STOPPED)):
        response = await api.post(f"/actions/{action}", json={"key": key}, headers=headers)
        response.raise_for_status()


def shoot(base: str, out: Path) -> None:
    with chromium(width=1440, height=900) as browser:
        wait = WebDriverWait(browser, 60)
        browser.get(f"{base}/console/")
        wait.until(expected_conditions.presence_of_element_located((By.ID, "token")))
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "#sign-in button").click()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "tr.group")) >= 12)
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#routed svg"))
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#cold-starts svg"))
        browser.find_element(By.ID, "poison-toggle").click()
        entries = "#poison-list tr[data-entry]"
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, entries)) >= 2)
        time.sleep(0.5)  # let the last poll's rendering settle before the picture
        full_page(browser, out / "console-pool.png")
        browser.get(f"{base}/console/#/key/{CRASHING}")
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#timeline li.event"))
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#key-poison tr[data-entry]"))
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#dead-letters tbody tr"))
        time.sleep(0.5)
        full_page(browser, out / "console-key.png")


def full_page(browser: Any, path: Path) -> None:
    """The whole page, not only the window (Chrome DevTools protocol)."""
    browser.execute_script("window.scrollTo(0, 0)")
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"saved {path}")


async def main(out: Path) -> None:
    pool = f"console-shots-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as workers:
        controller = Controller(settings(pool, Path(workers)))
        server = ApiServer(make_app(controller, token=TOKEN), host="127.0.0.1", port=0)
        await server.start()
        controller.api_url = server.url
        task = asyncio.create_task(controller.run(), name="controller")
        try:
            await asyncio.wait_for(controller.wait_leader(), 60)
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as api:
                await scenario(pool, api)
            await asyncio.to_thread(shoot, server.url, out)
        finally:
            controller.stop()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(task, 60)
            await server.stop()
            await broker.delete_pool_objects(pool)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where the PNGs go")
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(parser.parse_args().out))
