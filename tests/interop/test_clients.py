"""Clients nobody here wrote call a pool, reading only the wire: pika (Python), Node's
amqplib, and rabbitmq-c's command-line tools (`amqp-publish`, `amqp-consume`), installed by
`scripts/ensure_interop_clients.sh`. Each calls a cold key then the same key warm, for
`infra=42` and a non-ASCII key, reads interim messages (never `ok`) and errors (one JSON
shape, from a worker or from the controller). And a worker written with plain aio-pika, which
imports nothing of osrdyne, serves such keys.

rabbitmq-c's tools show bodies only (no headers): they are the "client that reads only
bodies" of the protocol, told errors apart by the body's `status` field.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pika
import pytest

from osrdyne import Client, PoolNames, Status
from osrdyne.wire import ERROR_FIELDS
from tests.conftest import Running

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).resolve().parent
KEYS = ["infra=42", "gare de lyon é"]


def plan(keys: list[str]) -> list[dict[str, Any]]:
    """What every client does: per key, a cold call, the same warm, one with progress, one
    the worker fails; then a key that can have no queue (the controller answers)."""
    calls: list[dict[str, Any]] = []
    for key in keys:
        calls += [
            {"key": key, "body": f"cold {key}"},
            {"key": key, "body": f"warm {key}"},
            {"key": key, "path": "progress"},
            {"key": key, "path": "fail", "body": "boom"},
        ]
    return [*calls, {"key": "", "body": "nobody"}]


def check(calls: list[dict[str, Any]], results: list[list[dict[str, Any]]], pool: str) -> None:
    """Each call's messages, as a client that reads headers sees them."""
    assert len(results) == len(calls)
    for call, messages in zip(calls, results, strict=True):
        final = messages[-1]
        assert not final["interim"], (call, messages)
        interim = messages[:-1]
        # An interim message never says `ok`: a client taking the first `ok` gets the answer.
        assert all(m["interim"] and m["status"] == Status.PROGRESS for m in interim), messages
        if call["key"] == "":
            assert final["status"] == Status.INVALID_KEY
            check_error_body(final["body"], Status.INVALID_KEY, pool=pool, key="")
        elif call.get("path") == "fail":
            assert final["status"] == Status.WORKER_ERROR
            check_error_body(final["body"], Status.WORKER_ERROR, pool=pool, key=call["key"])
        elif call.get("path") == "progress":
            assert [json.loads(m["body"]) for m in interim] == [
                {"step": i, "of": 3} for i in (1, 2, 3)
            ]
            assert (final["status"], final["body"]) == (Status.OK, "done")
        else:
            assert (final["status"], final["body"]) == (Status.OK, call["body"])


def check_error_body(body: str, status: str, *, pool: str, key: str) -> None:
    doc = json.loads(body)
    assert list(doc) == list(ERROR_FIELDS), doc  # one shape, whoever sends it
    assert (doc["status"], doc["pool"], doc["key"]) == (status, pool, key)
    assert isinstance(doc["error"], str) and doc["error"]


@pytest.fixture
async def serving(
    pool: str, make_controller: Callable[..., Awaitable[Running]], amqp_url: str
) -> str:
    """A pool whose echo workers start on demand; returns its request exchange."""
    await make_controller(pool)
    return PoolNames(pool).request_exchange


# -- pika -----------------------------------------------------------------------------------


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def pika_calls(url: str, exchange: str, calls: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The calls made with pika's blocking connection and direct reply-to."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        inbox: dict[str, list[dict[str, Any]]] = {}

        def on_reply(_ch: Any, _method: Any, props: Any, body: bytes) -> None:
            headers = props.headers or {}
            inbox.setdefault(props.correlation_id, []).append(
                {
                    "status": _text(headers.get("x-status")),
                    "interim": bool(headers.get("x-non-terminating-response")),
                    "body": body.decode(),
                }
            )

        channel.basic_consume("amq.rabbitmq.reply-to", on_reply, auto_ack=True)
        results = []
        for spec in calls:
            correlation_id = uuid.uuid4().hex
            headers = {"x-rpc-path": spec["path"]} if spec.get("path") else {}
            channel.basic_publish(
                exchange,
                spec["key"],
                spec.get("body", "").encode(),
                pika.BasicProperties(
                    reply_to="amq.rabbitmq.reply-to",
                    correlation_id=correlation_id,
                    headers=headers,
                    delivery_mode=2,
                ),
                mandatory=True,
            )
            deadline = time.monotonic() + 90
            messages = inbox.setdefault(correlation_id, [])
            while not (messages and not messages[-1]["interim"]):
                assert time.monotonic() < deadline, f"no answer to {spec}"
                connection.process_data_events(time_limit=0.1)
            results.append(messages)
        return results
    finally:
        connection.close()


async def test_pika(serving: str, pool: str, amqp_url: str) -> None:
    calls = plan(KEYS)
    results = await asyncio.to_thread(pika_calls, amqp_url, serving, calls)
    check(calls, results, pool)


# -- Node's amqplib -------------------------------------------------------------------------


@pytest.mark.slow
async def test_node_amqplib(serving: str, pool: str, amqp_url: str) -> None:
    node = shutil.which("node")
    assert node and (HERE / "node" / "node_modules" / "amqplib").is_dir(), (
        "run scripts/ensure_interop_clients.sh"
    )
    calls = plan(KEYS)
    process = await asyncio.create_subprocess_exec(
        node,
        str(HERE / "node" / "call.js"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    request = {"url": amqp_url, "exchange": serving, "timeout_ms": 90_000, "calls": calls}
    out, err = await asyncio.wait_for(process.communicate(json.dumps(request).encode()), 150)
    assert process.returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert not any(line["timed_out"] for line in lines), lines
    for line in lines:
        assert {m["correlation_id"] for m in line["messages"]} == {line["correlation_id"]}
    check(calls, [line["messages"] for line in lines], pool)


# -- rabbitmq-c's command-line tools --------------------------------------------------------


async def _run(*args: str, timeout: float = 90) -> bytes:
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{args[0]} gave no result within {timeout}s") from None
    assert process.returncode == 0, (args, err.decode())
    return out


async def test_rabbitmq_c_tools_read_bodies_only(
    serving: str, pool: str, amqp_url: str, tmp_path: Path
) -> None:
    assert shutil.which("amqp-publish"), "run scripts/ensure_interop_clients.sh"
    replies = f"{pool}-replies-rabbitmq-c"
    one_line = tmp_path / "one_line.sh"  # amqp-consume runs it per message, body on stdin
    one_line.write_text("#!/bin/sh\nbase64 -w0\necho\n")
    one_line.chmod(0o755)
    url = ["-u", amqp_url]
    # Durable: a transient queue that is not exclusive is a deprecated feature RabbitMQ 4.x
    # operators deny (4.3 by default), and this tool cannot declare an exclusive one.
    await _run("amqp-declare-queue", *url, "-d", "-q", replies)
    try:
        calls = plan(KEYS)
        for call in calls:
            headers = ["-H", f"x-rpc-path: {call['path']}"] if call.get("path") else []
            await _run(
                "amqp-publish", *url, "-e", serving, "-r", call["key"], "-t", replies, "-p",
                *headers, "-b", call.get("body", ""),
            )  # fmt: skip
            count = 4 if call.get("path") == "progress" else 1
            out = await _run("amqp-consume", *url, "-q", replies, "-c", str(count), str(one_line))
            bodies = [base64.b64decode(line).decode() for line in out.decode().split()]
            assert len(bodies) == count
            if call.get("path") == "progress":
                # No header to read: the three interim bodies, then the answer.
                assert bodies == [json.dumps({"step": i, "of": 3}) for i in (1, 2, 3)] + ["done"]
            elif call.get("path") == "fail" or call["key"] == "":
                status = Status.WORKER_ERROR if call["key"] else Status.INVALID_KEY
                check_error_body(bodies[0], status, pool=pool, key=call["key"])
            else:
                assert bodies == [call["body"]]
    finally:
        await _run("amqp-delete-queue", *url, "-q", replies)


# -- a worker with plain aio-pika -----------------------------------------------------------


async def test_a_plain_aio_pika_worker_serves_keys_of_any_characters(
    pool: str, make_controller: Callable[..., Awaitable[Running]], amqp_url: str
) -> None:
    """Its pamqp checks every queue name it consumes: before names were encoded, it could
    not consume `infra=42`'s queue at all."""
    command = [sys.executable, str(HERE / "plain_worker.py")]
    await make_controller(pool, driver={"subprocess": {"command": command}})
    keys = [*KEYS, "k" * 250]  # the last one's queue has the hashed name
    async with Client(amqp_url) as client:
        answers = await asyncio.gather(
            *(client.call(pool, key, key.encode(), timeout=90) for key in keys)
        )
        assert [(a.status, a.body) for a in answers] == [
            (Status.OK, b"plain: " + key.encode()) for key in keys
        ]
