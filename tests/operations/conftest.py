"""Fixtures of the operations tests: a controller's HTTP API served in the test's event loop
(the CLI starts it in production), and reading its Prometheus text like a scraper would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from osrdyne.ops._api import ApiServer, make_app
from tests.conftest import Running

ServeApi = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def serve_api() -> AsyncIterator[ServeApi]:
    """Serve a running controller's API on a free port; yields an HTTP client for it."""
    servers: list[ApiServer] = []
    clients: list[httpx.AsyncClient] = []

    async def serve(running: Running, *, token: str | None = None) -> httpx.AsyncClient:
        server = ApiServer(make_app(running.controller, token=token), host="127.0.0.1", port=0)
        await server.start()
        servers.append(server)
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=30)
        clients.append(http)
        return http

    yield serve
    for http in clients:
        await http.aclose()
    for server in servers:
        await server.stop()


async def scrape(http: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics and parse it: {(sample name, sorted labels): value}."""
    response = await http.get("/metrics")
    response.raise_for_status()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def sample(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
