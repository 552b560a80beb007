"""A controller killed with SIGKILL and started again adopts the queues and worker groups that
outlived it instead of duplicating them. Real processes: `python -m osrdyne run`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from osrdyne import Client
from tests import broker
from tests.waiting import eventually


def write_config(path: Path, pool: str, state_dir: Path) -> Path:
    path.write_text(
        f"""
pool = "{pool}"
[amqp]
url = "{broker.AMQP_URL}"
management_url = "{broker.MANAGEMENT_URL}"
[groups]
unbind_delay = 120
stop_delay = 120
loop_interval = 1
[api]
enabled = false
[driver]
kind = "subprocess"
[driver.subprocess]
command = ["{sys.executable}", "-m", "worker_sdk.examples.echo"]
owner = "{state_dir}"
stop_timeout = 5
"""
    )
    return path


def start_controller(config: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "osrdyne", "run", "--config", str(config)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def workers_of(pool: str) -> dict[int, str]:
    """pid -> key of every live process whose environment says it is a worker of `pool`."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = dict(
                item.split(b"=", 1)
                for item in (entry / "environ").read_bytes().split(b"\0")
                if b"=" in item
            )
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if env.get(b"WORKER_POOL") == pool.encode() and state != "Z":
            found[int(entry.name)] = env[b"WORKER_KEY"].decode()
    return found


async def test_sigkilled_controller_is_replaced_without_duplicate_groups(
    pool: str, client: Client, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "osrdyne.toml", pool, tmp_path / "workers")
    log = tmp_path / "controller.log"
    first = start_controller(config, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        await eventually(lambda: broker.pool_declared(pool), what="pool declared")
        before = (await client.call(pool, "survivor", path="whoami", timeout=90)).json()
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert workers_of(pool) == {before["pid"]: "survivor"}  # the worker outlived it

        # Still served on the fast path while no controller runs at all.
        assert (await client.call(pool, "survivor", b"alone", timeout=30)).body == b"alone"

        second = start_controller(config, log)
        after = (await client.call(pool, "survivor", path="whoami", timeout=90)).json()
        assert after["pid"] == before["pid"]
        assert (await client.call(pool, "newcomer", b"hi", timeout=90)).ok
        assert sorted(workers_of(pool).values()) == ["newcomer", "survivor"]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    await eventually(lambda: not workers_of(pool), what="workers ended with the controller")
    assert os.path.exists(log)
