"""Test helpers around the real broker: where it is, what a pool has on it (request queues,
bindings, consumers), its workers' activity reports, and removing a test pool's objects."""

from __future__ import annotations

import contextlib
import os
import re
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import httpx

AMQP_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
#: The RabbitMQ release of the brokers the tests start themselves (the private node of the
#: fault tests, the clusters): "3" (3.10, Debian 12's: the default) or "4" (4.0, Debian 13's,
#: from scripts/rabbitmq_root.sh). scripts/test.sh's 4.0 pass sets it with RABBITMQ_URL
#: (`scripts/ensure_broker.sh --version 4`).
VERSION = os.environ.get("OSRDYNE_RABBITMQ_VERSION", "3")
if VERSION not in ("3", "4"):
    raise RuntimeError(f"OSRDYNE_RABBITMQ_VERSION is 3 or 4, not {VERSION!r}")


def _vhost() -> str:
    path = urllib.parse.urlsplit(AMQP_URL).path.lstrip("/")
    return urllib.parse.quote(urllib.parse.unquote(path) or "/", safe="")


def management() -> httpx.AsyncClient:
    parts = urllib.parse.urlsplit(AMQP_URL)
    auth = (
        urllib.parse.unquote(parts.username or "guest"),
        urllib.parse.unquote(parts.password or "guest"),
    )
    return httpx.AsyncClient(base_url=MANAGEMENT_URL + "/api", auth=auth, timeout=30)


async def delete_pool_objects(pool: str) -> None:
    """Delete every queue, exchange and policy of a test pool."""
    vhost = _vhost()
    prefix = "^" + re.escape(pool + "-")
    async with management() as http:
        for kind in ("queues", "exchanges"):
            # Every page first, then delete: the listing lags behind deletions (a pool may
            # have thousands of queues, more than one page).
            names: list[str] = []
            page = 1
            while True:
                response = await http.get(
                    f"/{kind}/{vhost}",
                    params={
                        "name": prefix,
                        "use_regex": "true",
                        "columns": "name",
                        "page": page,
                        "page_size": 500,
                    },
                )
                response.raise_for_status()
                doc = response.json()
                names.extend(item["name"] for item in doc["items"])
                if page >= doc.get("page_count", 1):
                    break
                page += 1
            for name in names:
                await http.delete(f"/{kind}/{vhost}/{urllib.parse.quote(name, safe='')}")
        for policy in ("requests", "poison"):
            await http.delete(f"/policies/{vhost}/osrdyne-{pool}-{policy}")


async def pool_declared(pool: str) -> bool:
    """True once a controller has declared the pool's request exchange."""
    name = urllib.parse.quote(f"{pool}-req-xchg", safe="")
    async with management() as http:
        response = await http.get(f"/exchanges/{_vhost()}/{name}")
    return response.status_code == 200


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


async def request_queue(pool: str, key: str) -> dict[str, Any] | None:
    """The management API's view of the request queue of `key`, None when it does not exist."""
    from osrdyne.wire import PoolNames

    name = PoolNames(pool).request_queue(key)
    async with management() as http:
        response = await http.get(f"/queues/{_vhost()}/{_quote(name)}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


async def request_queues(pool: str) -> list[str]:
    """Names of the request queues of `pool`."""
    from osrdyne.wire import PoolNames

    prefix = PoolNames(pool).request_queue_prefix
    async with management() as http:
        response = await http.get(f"/queues/{_vhost()}", params={"columns": "name"})
    response.raise_for_status()
    return [q["name"] for q in response.json() if q["name"].startswith(prefix)]


async def ready_messages(*names: str) -> dict[str, int]:
    """The ready messages of each queue named, by passive declarations: exact now, unlike
    the management API's statistics (they lag up to 5 s). A queue that does not exist is
    left out."""
    found: dict[str, int] = {}
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        for name in names:
            try:
                queue = await channel.declare_queue(name, passive=True)
            except aio_pika.exceptions.ChannelNotFoundEntity:
                channel = await connection.channel()  # the refusal closed the channel
                continue
            found[name] = int(queue.declaration_result.message_count or 0)
    finally:
        await connection.close()
    return found


async def bound_keys(pool: str) -> set[str]:
    """Routing keys of the queue bindings of `pool`'s request exchange."""
    from osrdyne.wire import PoolNames

    exchange = PoolNames(pool).request_exchange
    async with management() as http:
        response = await http.get(f"/exchanges/{_vhost()}/{_quote(exchange)}/bindings/source")
    response.raise_for_status()
    return {b["routing_key"] for b in response.json() if b.get("destination_type") == "queue"}


def worker_settings(pool: str, key: str, **overrides: Any) -> Any:
    """`worker_sdk.WorkerSettings` of an in-process worker of `key`, as a driver would give."""
    import uuid

    from osrdyne.wire import PoolNames
    from worker_sdk import WorkerSettings

    names = PoolNames(pool)
    values: dict[str, Any] = {
        "id": f"w-{uuid.uuid4().hex[:6]}",
        "key": key,
        "pool": pool,
        "requests_queue": names.request_queue(key),
        "activity_exchange": names.activity_exchange,
        "amqp_uri": AMQP_URL,
        **overrides,
    }
    return WorkerSettings(**values)


class RawText(str):
    """Text of raw bytes, as a client in another language may send it (a routing key, a
    header value that is not UTF-8).

    pamqp (under aio-pika) only sends `str`, encoded as UTF-8: a Python client cannot send
    such bytes at all. This `str` encodes to the bytes it was made from, so a test can put on
    the wire what any other AMQP client could."""

    raw: bytes

    def __new__(cls, raw: bytes) -> RawText:
        text = super().__new__(cls, raw.decode("utf-8", errors="replace"))
        text.raw = raw
        return text

    def encode(self, *_: object, **__: object) -> bytes:  # type: ignore[override]
        return self.raw


class ActivityReports:
    """The activity reports of a pool's workers, heard beside its controller, and the
    consumers of its request queues (a passive declare: no management API, no lag)."""

    def __init__(
        self, pool: str, channel: aio_pika.abc.AbstractChannel, queue: aio_pika.abc.AbstractQueue
    ) -> None:
        from osrdyne.wire import PoolNames

        self.names = PoolNames(pool)
        self._channel = channel
        self._queue = queue

    async def read(self) -> list[Mapping[str, Any]]:
        """The headers of the reports that arrived since the last read."""
        found = []
        while (report := await self._queue.get(no_ack=True, fail=False)) is not None:
            found.append(report.headers or {})
        return found

    async def consumers(self, key: str) -> int:
        queue = await self._channel.declare_queue(self.names.request_queue(key), passive=True)
        return int(queue.declaration_result.consumer_count or 0)


@contextlib.asynccontextmanager
async def activity_reports(pool: str) -> AsyncIterator[ActivityReports]:
    """Hear `pool`'s activity reports from now on (an exclusive queue bound to its activity
    exchange, gone with the connection); the controller must have declared the exchange."""
    from osrdyne.wire import PoolNames

    connection = await aio_pika.connect(AMQP_URL, client_properties={"connection_name": pool})
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(PoolNames(pool).activity_exchange)
        yield ActivityReports(pool, channel, queue)
