"""Fixtures of the bounds tests: the control loops' fake clock for the pure ones, controller
processes (signals for real) for the stop tests, TCP proxies between a controller and the
broker that can stop forwarding (a broker that stopped answering)."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests import broker
from tests.console.conftest import serve
from tests.control_loops.conftest import clock
from tests.faults.conftest import start_controller_process
from tests.tcp_proxy import TcpProxy

__all__ = ["clock", "make_proxy", "serve", "start_controller_process"]


@pytest.fixture
async def make_proxy() -> AsyncIterator[Callable[[str], Awaitable[tuple[TcpProxy, str]]]]:
    """A proxy in front of the broker URL given (AMQP or management), and the URL through it;
    every proxy closed after the test."""
    proxies: list[TcpProxy] = []

    async def make(url: str) -> tuple[TcpProxy, str]:
        parts = urllib.parse.urlsplit(url)
        proxy = await TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5672).start()
        proxies.append(proxy)
        netloc = parts.netloc.rsplit(":", 1)[0] if parts.port else parts.netloc
        return proxy, parts._replace(netloc=f"{netloc}:{proxy.port}").geturl()

    yield make
    for proxy in proxies:
        await proxy.close()


AMQP_URL = broker.AMQP_URL
MANAGEMENT_URL = broker.MANAGEMENT_URL
