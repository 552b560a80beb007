"""Fixtures of the fault tests: a counting caller, the report rows, controllers as processes,
and the private RabbitMQ node (`rabbit_node`) for the tests that restart a broker.

The caller speaks raw AMQP (not `osrdyne.Client`) so that it sees every reply, duplicates
included, and can count by correlation id; it publishes with `mandatory` and publisher
confirms, persistent, retrying a publish that was not confirmed, like a careful client.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import pytest

from osrdyne import wire
from osrdyne.wire import DIRECT_REPLY_TO, Header, PoolNames
from tests import broker
from tests.conftest import settings_dict
from tests.faults import report
from tests.faults.rabbit_node import rabbit_node  # noqa: F401  (a fixture)

PUBLISH_ERRORS = (
    aio_pika.exceptions.AMQPError,
    ConnectionError,
    OSError,
    asyncio.TimeoutError,
    RuntimeError,
)


# -- report rows ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def reliability_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get(report.ENV)
    return Path(env) if env else tmp_path_factory.getbasetemp() / "reliability.jsonl"


@pytest.fixture
def make_tally(reliability_path: Path) -> Iterator[Callable[..., report.Tally]]:
    """Tallies of the test; each one's row is printed and written when the test ends."""
    tallies: list[report.Tally] = []

    def make(scenario: str, note: str = "") -> report.Tally:
        tallies.append(report.Tally(scenario, note=note))
        return tallies[-1]

    yield make
    for tally in tallies:
        report.write_row(reliability_path, tally.row())


# -- the counting caller --------------------------------------------------------------------


class Caller:
    """Publishes requests and records every final reply by correlation id into a tally.

    `reply_queue=None` uses direct reply-to (at most once: replies in flight when the
    connection drops are gone); a name uses a durable quorum queue of that name as `reply_to`.
    """

    def __init__(
        self,
        url: wire.Urls,
        tally: report.Tally,
        *,
        reply_queue: str | None = None,
        persistent: bool = True,
        name: str = "fault test caller",
    ) -> None:
        self.url = url
        self.tally = tally
        self.reply_queue = reply_queue
        self.persistent = persistent
        self.name = name
        self.bodies: dict[str, bytes] = {}
        self.publish_retries = 0
        #: Connections lost so far, and at which of them each request was sent.
        self.epoch = 0
        self.sent_epoch: dict[str, int] = {}
        self.keys: dict[str, str | bytes] = {}
        #: Seconds from publish to first final answer, by id.
        self.sent_at: dict[str, float] = {}
        self.latency: dict[str, float] = {}
        self.connection: aio_pika.abc.AbstractRobustConnection | None = None
        self.channel: aio_pika.abc.AbstractRobustChannel | None = None

    async def __aenter__(self) -> Caller:
        # Through osrdyne's failover connection: `url` may list a cluster's nodes.
        self.connection = await wire.connect_robust(self.url, name=self.name, reconnect_interval=1)
        self.connection.close_callbacks.add(self._on_lost)
        self.channel = await self.connection.channel(publisher_confirms=True)  # type: ignore[assignment]
        assert self.channel is not None
        if self.reply_queue is None:
            # Declared (passively), not `get_queue(ensure=False)`: only declared queues have
            # their consumers restored by the robust channel after a reconnection.
            queue = await self.channel.declare_queue(DIRECT_REPLY_TO, passive=True)
            await queue.consume(self._on_reply, no_ack=True)
        else:
            queue = await self.channel.declare_queue(
                self.reply_queue, durable=True, arguments={"x-queue-type": "quorum"}
            )
            await queue.consume(self._on_reply)
        return self

    async def __aexit__(self, *_: Any) -> None:
        if self.connection is not None:
            await self.connection.close()

    def _on_lost(self, *_: Any) -> None:
        self.epoch += 1

    @property
    def reply_to(self) -> str:
        return self.reply_queue or DIRECT_REPLY_TO

    async def _on_reply(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        headers = message.headers or {}
        if not headers.get(Header.NON_TERMINATING):
            status = headers.get(Header.STATUS, "")
            if isinstance(status, bytes):
                status = status.decode(errors="replace")
            cid = message.correlation_id or ""
            self.tally.replied(cid, str(status))
            self.bodies.setdefault(cid, message.body)
            if cid in self.sent_at:
                self.latency.setdefault(cid, time.monotonic() - self.sent_at[cid])
        if self.reply_queue is not None:
            await message.ack()

    async def send(
        self,
        pool: str,
        key: str | bytes,
        body: bytes = b"",
        *,
        path: str | None = None,
        expiration: float | None = None,
        retry_for: float = 60.0,
    ) -> str:
        """Publish one request (retried until confirmed, within `retry_for`); its id."""
        assert self.channel is not None
        cid = uuid.uuid4().hex
        headers = {Header.RPC_PATH: path} if path else {}
        message = aio_pika.Message(
            body,
            headers=headers,
            correlation_id=cid,
            reply_to=self.reply_to,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT if self.persistent else None,
            expiration=expiration,
        )
        deadline = time.monotonic() + retry_for
        while True:
            try:
                exchange = await self.channel.get_exchange(
                    PoolNames(pool).request_exchange, ensure=False
                )
                with wire.lost_not_cancelled("fault test caller"):
                    await exchange.publish(
                        message,
                        routing_key=key,
                        mandatory=True,  # type: ignore[arg-type]
                        timeout=10,
                    )
                break
            except PUBLISH_ERRORS:
                if time.monotonic() > deadline:
                    raise
                self.publish_retries += 1
                await asyncio.sleep(0.5)
        self.tally.sent_one(cid)
        self.sent_epoch[cid] = self.epoch
        self.keys[cid] = key
        self.sent_at[cid] = time.monotonic()
        return cid

    async def settle(self, timeout: float, *, grace: float = 1.0) -> list[str]:
        """Wait (bounded) until every request has a final answer (but those the tally
        excuses), then `grace` seconds more for duplicates; the ids still unanswered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.unanswered():
            await asyncio.sleep(0.1)
        await asyncio.sleep(grace)
        return self.unanswered()

    def unanswered(self) -> list[str]:
        """The ids of requests with no final answer yet, but those the tally excuses."""
        return [c for c in self.tally.pending() if c not in self.tally.excused]

    def slowest(self, n: int = 5) -> list[tuple[str | bytes, int, float]]:
        """(key, epoch, seconds) of the `n` slowest answered requests: for diagnostics."""
        slow = sorted(self.latency.items(), key=lambda item: -item[1])[:n]
        return [(self.keys[c], self.sent_epoch[c], round(t, 1)) for c, t in slow]

    def describe(self, cids: list[str]) -> list[tuple[str | bytes, int]]:
        """(key, connection epoch) of each request: for failure messages."""
        return [(self.keys.get(c, "?"), self.sent_epoch.get(c, -1)) for c in cids]

    def statuses(self, cids: list[str]) -> collections.Counter[str | None]:
        return collections.Counter(self.tally.status_of(c) for c in cids)


@pytest.fixture
async def make_caller(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Callable[..., Any]]:
    callers: list[Caller] = []

    async def make(
        tally: report.Tally, *, url: wire.Urls = broker.AMQP_URL, **kwargs: Any
    ) -> Caller:
        caller = Caller(url, tally, name=f"fault test {request.node.name}", **kwargs)
        await caller.__aenter__()
        callers.append(caller)
        return caller

    yield make
    for caller in callers:
        await caller.__aexit__()


# -- controllers as processes -----------------------------------------------------------------


def echo_driver(*, quick_restarts: bool = True) -> dict[str, Any]:
    """The driver settings of the fault tests' workers: echo workers as processes that report
    their activity every 0.5 s, drain within 5 s, and (`quick_restarts`) are started again
    within 0.2-2 s when they exit (as they do when started while the broker is down); else
    after the driver's own backoff."""
    settings: dict[str, Any] = {
        "command": [sys.executable, "-m", "worker_sdk.examples.echo"],
        "env": {"WORKER_ACTIVITY_INTERVAL": "0.5", "WORKER_DRAIN_TIMEOUT": "5"},
        "stop_timeout": 5,
    }
    if quick_restarts:
        settings |= {"restart_backoff": 0.2, "restart_backoff_max": 2}
    return {"kind": "subprocess", "subprocess": settings}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


def to_toml(doc: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer for settings documents (tables, strings, numbers, lists)."""
    lines = [
        f"{json.dumps(k)} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)
    ]
    text = "\n".join(lines) + "\n"
    for k, v in doc.items():
        if isinstance(v, dict):
            name = f"{prefix}{json.dumps(k)}"
            text += f"\n[{name}]\n" + to_toml(v, name + ".")
    return text


def process_settings(pool: str, state_dir: Path, **overrides: Any) -> dict[str, Any]:
    """Settings of a controller process: the base ones, with groups that outlive a test."""
    groups = {"unbind_delay": 120, "stop_delay": 120, **overrides.pop("groups", {})}
    return settings_dict(pool, state_dir, groups=groups, **overrides)


class ControllerProcess:
    """`python -m osrdyne run` for one pool, its output in a log file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "osrdyne", "run", "--config", str(config)],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout: float = 30) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def start_controller_process(tmp_path: Path) -> Iterator[Callable[..., ControllerProcess]]:
    """Start controller processes from settings dicts; all stopped (SIGTERM) after the test."""
    started: list[ControllerProcess] = []

    def start(settings: dict[str, Any]) -> ControllerProcess:
        n = len(started)
        config = tmp_path / f"osrdyne-{n}.toml"
        config.write_text(to_toml(settings))
        started.append(ControllerProcess(config, tmp_path / f"controller-{n}.log"))
        return started[-1]

    yield start
    for process in started:
        process.terminate()


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
