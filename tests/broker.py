"""Test helpers around the real broker: where it is, and removing a test pool's objects."""

from __future__ import annotations

import os
import re
import urllib.parse

import httpx

AMQP_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")


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
            response = await http.get(
                f"/{kind}/{vhost}",
                params={
                    "name": prefix,
                    "use_regex": "true",
                    "columns": "name",
                    "page": 1,
                    "page_size": 500,
                },
            )
            response.raise_for_status()
            for item in response.json()["items"]:
                name = urllib.parse.quote(item["name"], safe="")
                await http.delete(f"/{kind}/{vhost}/{name}")
        await http.delete(f"/policies/{vhost}/osrdyne-{pool}-requests")


async def pool_declared(pool: str) -> bool:
    """True once a controller has declared the pool's request exchange."""
    name = urllib.parse.quote(f"{pool}-req-xchg", safe="")
    async with management() as http:
        response = await http.get(f"/exchanges/{_vhost()}/{name}")
    return response.status_code == 200
