"""The HTTP API and the status it serves: a malformed `Authorization` header is a 401 (the
first version answered 500 with a traceback), and no URL password is ever shown, whatever
failed (the first version printed the management URL's credentials in `/status` and
`/pulse/scaling` when it did not answer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from osrdyne.ops import ApiServer, make_app
from tests.conftest import Running

pytestmark = pytest.mark.timeout(120)

TOKEN = "s3cret-token"
SECRET = "management-PASSWORD-42"


@pytest.fixture
async def api(
    pool: str, make_controller: Callable[..., Awaitable[Running]]
) -> AsyncIterator[tuple[Running, int]]:
    """A controller whose management URL has credentials and points where nothing answers,
    behind the HTTP API with a token; torn down once its session has failed (a session
    retries the management API for a while, and stops only between sessions)."""
    running = await make_controller(
        pool,
        wait=False,
        driver={"kind": "noop"},
        amqp={"management_url": f"http://admin:{SECRET}@127.0.0.1:9/", "management_retry": 2},
    )
    server = ApiServer(make_app(running.controller, token=TOKEN), host="127.0.0.1", port=0)
    await server.start()
    yield running, server.port
    await server.stop()
    for _ in range(600):
        if running.controller.last_error:
            break
        await asyncio.sleep(0.1)


async def raw_request(port: int, header: bytes) -> bytes:
    """One HTTP request with a header line of raw bytes (httpx refuses to send such bytes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /status HTTP/1.1\r\nHost: x\r\n" + header + b"\r\nConnection: close\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer.split(b"\r\n", 1)[0]


MALFORMED = [
    b"Authorization: Bearer \xff\xfe",  # not UTF-8
    b"Authorization: \xc3\x28",  # broken UTF-8
    b"Authorization: Bearer " + TOKEN.encode() + b"\x80",  # the token plus a byte
    b"Authorization: " + b"B" * 8000,  # huge
    b"Authorization: bearer " + TOKEN.encode(),  # the scheme's case
    b"Authorization: Bearer",  # no token
]


@pytest.mark.slow
async def test_the_api_answers_401_to_any_wrong_header_and_never_shows_a_password(
    api: tuple[Running, int],
) -> None:
    running, port = api
    for header in MALFORMED:
        assert await raw_request(port, header) == b"HTTP/1.1 401 Unauthorized", header
    right = b"Authorization: Bearer " + TOKEN.encode()
    assert await raw_request(port, right) == b"HTTP/1.1 200 OK"

    # The session fails on the management API; nothing shown says its password.
    for _ in range(600):
        if running.controller.last_error:
            break
        await asyncio.sleep(0.1)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
        status = await http.get("/status", timeout=90)
        pulse = await http.get("/pulse/scaling", timeout=90)
    doc = status.json()
    assert doc["last_error"] and "ConnectError" in doc["last_error"]
    assert pulse.status_code == 502
    outputs: list[Any] = [status.text, pulse.text, repr(running.controller.status())]
    for output in outputs:
        assert SECRET not in output
