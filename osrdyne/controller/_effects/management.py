"""The RabbitMQ management HTTP API, as much of it as osrdyne needs.

Listing queues and bindings (what exists, at start and for anti-entropy), queue details for
status, policies, and the nodes' limits (`broker_limits`). Credentials come from the
management URL when it has them (else from the AMQP URL), and are taken out of it, so no
error message can quote them. Transient failures (connection refused, 5xx) are retried with
tenacity, on the next node of a cluster when several management URLs are given; anything
else is raised as
`httpx.HTTPStatusError`.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Sequence
from typing import Any

import httpx
import tenacity

logger = logging.getLogger(__name__)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500


def _node(base_url: str, credentials: tuple[str, str]) -> tuple[str, tuple[str, str]]:
    """(base URL without credentials, credentials) of one node."""
    url = httpx.URL(base_url)
    if url.username:
        # Credentials in the URL win, and leave it: errors quote URLs, never passwords.
        credentials = (url.username, url.password or "")
        url = url.copy_with(username=None, password=None)
    return str(url).rstrip("/"), credentials


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


class ManagementApi:
    """The management API of a broker, through any of its nodes.

    `base_urls` lists one URL per node of a cluster (or one comma-separated string). Calls go
    to the node that answered last; a call that fails there for a transient reason is retried
    on the next node, round after round, within `retry_for` seconds."""

    def __init__(
        self,
        base_urls: str | Sequence[str],
        *,
        vhost: str,
        credentials: tuple[str, str],
        timeout: float = 10.0,
        retry_for: float = 30.0,
    ) -> None:
        self.vhost = vhost
        items = base_urls.split(",") if isinstance(base_urls, str) else list(base_urls)
        self._nodes = [_node(item.strip(), credentials) for item in items if item.strip()]
        if not self._nodes:
            raise ValueError("no management API address given")
        self._current = 0
        self._http = httpx.AsyncClient(timeout=timeout)
        self._retry = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_transient),
            wait=tenacity.wait_exponential(multiplier=0.1, max=5),
            stop=tenacity.stop_after_delay(retry_for),
            before_sleep=tenacity.before_sleep_log(logger, logging.WARNING),
            reraise=True,
        )

    @property
    def node(self) -> str:
        """The base URL of the node calls go to now (without credentials)."""
        return self._nodes[self._current][0]

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(
        self, method: str, path: str, *, missing_ok: bool = False, **kwargs: Any
    ) -> Any:
        """The JSON answer; None for a 404 when `missing_ok` (the object does not exist)."""
        # A fresh retry state per request: one shared by concurrent requests ends their tries.
        async for attempt in self._retry.copy():
            with attempt:
                current = self._current
                base, auth = self._nodes[current]
                try:
                    response = await self._http.request(
                        method, base + "/api" + path, auth=auth, **kwargs
                    )
                    if missing_ok and response.status_code == 404:
                        return None
                    response.raise_for_status()
                except Exception as exc:
                    if _transient(exc) and self._current == current:
                        # This node is down or failing: the next attempt asks another one.
                        self._current = (current + 1) % len(self._nodes)
                    raise
                return response.json() if response.content else None
        raise AssertionError("unreachable")  # pragma: no cover

    async def overview(self, *, columns: str | None = None) -> dict[str, Any]:
        params = {"columns": columns} if columns else None
        result: dict[str, Any] = await self._request("GET", "/overview", params=params)
        return result

    async def nodes(self, *, columns: str | None = None) -> list[dict[str, Any]]:
        """The cluster's nodes with their limits and use (file descriptors, processes,
        memory, disk, alarms): needs the `monitoring` tag or more."""
        params = {"columns": columns} if columns else None
        result = await self._request("GET", "/nodes", params=params)
        if not isinstance(result, list):
            raise ValueError(f"/api/nodes answered a {type(result).__name__}, not a list")
        return [node for node in result if isinstance(node, dict)]

    async def queues(self, *, name_regex: str, columns: str | None = None) -> list[dict[str, Any]]:
        """Every queue of the vhost whose name matches `name_regex`, page by page."""
        items: list[dict[str, Any]] = []
        page = 1
        while True:
            params: dict[str, Any] = {
                "page": page,
                "page_size": 500,
                "name": name_regex,
                "use_regex": "true",
            }
            if columns:
                params["columns"] = columns
            doc = await self._request("GET", f"/queues/{_q(self.vhost)}", params=params)
            items.extend(doc["items"])
            if page >= doc.get("page_count", 1):
                return items
            page += 1

    async def connections(self, *, columns: str, max_pages: int) -> list[dict[str, Any]]:
        """The broker's client connections, page by page, at most `max_pages` pages of 500
        (a bound on what one reading costs a broker with very many connections)."""
        items: list[dict[str, Any]] = []
        for page in range(1, max_pages + 1):
            params = {"page": page, "page_size": 500, "columns": columns}
            doc = await self._request("GET", "/connections", params=params)
            items.extend(doc["items"])
            if page >= doc.get("page_count", 1):
                break
        return items

    async def queue(self, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._request(
            "GET", f"/queues/{_q(self.vhost)}/{_q(name)}", missing_ok=True
        )
        return result

    async def exchange(self, name: str) -> dict[str, Any] | None:
        """The exchange's details (with `message_stats`), None when it does not exist."""
        result: dict[str, Any] | None = await self._request(
            "GET", f"/exchanges/{_q(self.vhost)}/{_q(name)}", missing_ok=True
        )
        return result

    async def connection(self, name: str) -> dict[str, Any] | None:
        """A client connection's details (with `client_properties`), None when it is gone."""
        result: dict[str, Any] | None = await self._request(
            "GET", f"/connections/{_q(name)}", missing_ok=True
        )
        return result

    async def delete_queue(self, name: str) -> None:
        """Delete a queue whatever it holds (operators' tools; the controller never does)."""
        await self._request("DELETE", f"/queues/{_q(self.vhost)}/{_q(name)}", missing_ok=True)

    async def bindings_from(self, exchange: str) -> list[dict[str, Any]]:
        """The bindings whose source is `exchange`."""
        result: list[dict[str, Any]] = await self._request(
            "GET", f"/exchanges/{_q(self.vhost)}/{_q(exchange)}/bindings/source"
        )
        return result

    async def put_policy(
        self, name: str, *, pattern: str, definition: dict[str, Any], priority: int, apply_to: str
    ) -> None:
        body = {
            "pattern": pattern,
            "definition": definition,
            "priority": priority,
            "apply-to": apply_to,
        }
        await self._request("PUT", f"/policies/{_q(self.vhost)}/{_q(name)}", json=body)

    async def delete_policy(self, name: str) -> None:
        await self._request("DELETE", f"/policies/{_q(self.vhost)}/{_q(name)}", missing_ok=True)
