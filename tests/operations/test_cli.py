"""The `osrdyne` command as a user meets it: run as a process, as a shell would.

Every mistake is answered with one line on stderr and exit status 2 (no traceback); `call`
writes the answer's bytes untouched; `status` fits 80 columns and shows whole keys; `poison
replay` gives a request a fresh deadline; `run` with `log.json` makes its workers log JSON
too; `--version` and plain boolean flags in the help."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import tomli_w
from aiohttp import web

import osrdyne
from osrdyne import Client, PoolNames, Status
from osrdyne.controller import poison
from osrdyne.ops._api import ApiServer, make_app
from tests import broker
from tests.conftest import Running, raw_connection, settings_dict
from tests.operations.conftest import ServeApi
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(150)


async def osrdyne_cli(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> tuple[int, bytes, str]:
    """Run `python -m osrdyne ARGS` (stdout and stderr are pipes, not terminals)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "osrdyne",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), timeout)
    assert process.returncode is not None
    return process.returncode, out, err.decode()


def write_toml(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


MISTAKES: dict[str, tuple[list[str], str]] = {
    "missing configuration": (["run", "--config", "{tmp}/missing.toml"], "does not exist"),
    "invalid TOML": (["run", "--config", "{tmp}/bad.toml"], "is not TOML"),
    "unknown driver kind": (
        ["run", "--config", "{tmp}/kind.toml"],
        "unknown driver 'dokcer' (did you mean 'docker'?)",
    ),
    "misspelt option": (
        ["run", "--config", "{tmp}/typo.toml"],
        "unknown option 'groups.unbind_dealy' (did you mean 'unbind_delay'?)",
    ),
    "misspelt driver option": (
        ["run", "--config", "{tmp}/driver.toml"],
        "unknown option 'driver.subprocess.comand' (did you mean 'command'?)",
    ),
    "pool name no client accepts": (["run", "--config", "{tmp}/pool.toml"], "pool:"),
    "poison list, broker down": (
        ["poison", "list", "p", "--url", "amqp://guest:s3cret@127.0.0.1:1/%2F"],
        "cannot reach the broker at amqp://guest:***@127.0.0.1:1/%2F",
    ),
    "poison list, no such pool": (
        ["poison", "list", "no-such-pool-{id}"],
        "pool 'no-such-pool-{id}' has no poison queue",
    ),
    "call, body file missing": (
        ["call", "p", "k", "-d", "@{tmp}/missing.txt"],
        "cannot read the request body from",
    ),
    "call, broker down": (
        ["call", "p", "k", "--url", "amqp://guest:s3cret@127.0.0.1:1/%2F"],
        "cannot reach the broker at amqp://guest:***@127.0.0.1:1/%2F",
    ),
    "status, API down": (["status", "--api", "http://127.0.0.1:1"], "cannot reach"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
@pytest.mark.slow
async def test_a_mistake_is_one_line_and_exit_status_2(
    mistake: str, tmp_path: Path, amqp_url: str
) -> None:
    write_toml(tmp_path / "bad.toml", 'pool = "x\n')
    write_toml(tmp_path / "kind.toml", '[driver]\nkind = "dokcer"\n')
    write_toml(tmp_path / "typo.toml", "[groups]\nunbind_dealy = 5\n")
    write_toml(tmp_path / "driver.toml", '[driver.subprocess]\ncomand = ["w"]\n')
    write_toml(tmp_path / "pool.toml", 'pool = "infra=42"\n')
    args, expected = MISTAKES[mistake]
    fill = {"tmp": str(tmp_path), "id": uuid.uuid4().hex[:6]}
    code, out, err = await osrdyne_cli(*(a.format(**fill) for a in args))
    assert code == 2, err
    assert out == b""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "(hint: " in lines[0]
    assert expected.format(**fill) in lines[0]
    assert "s3cret" not in err


@pytest.mark.slow
async def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    code, _, err = await osrdyne_cli("--debug", "run", "--config", str(tmp_path / "nope.toml"))
    assert code != 0 and "Traceback" in err and "ConfigurationError" in err


@pytest.mark.slow
async def test_version_and_plain_flags() -> None:
    code, out, _ = await osrdyne_cli("--version")
    assert code == 0 and out.decode().strip() == f"osrdyne {osrdyne.__version__}"
    for command in ([], ["call"], ["status"], ["poison", "replay"]):
        code, out, _ = await osrdyne_cli(*command, "--help")
        assert code == 0 and b"--help" in out
        assert b"<bool>" not in out  # a flag takes no value


@pytest.mark.slow
async def test_call_writes_the_answer_byte_for_byte(
    controller: Running, pool: str, tmp_path: Path, amqp_url: str
) -> None:
    body = bytes(range(256)) * 4 + b"\x00no newline at the end"
    (tmp_path / "body.bin").write_bytes(body)
    code, out, err = await osrdyne_cli(
        "call", pool, "bin", "-d", f"@{tmp_path}/body.bin", "--url", amqp_url, "--timeout", "90"
    )
    assert code == 0, err
    assert out == body and err == ""
    # Progress messages: no progress display (stderr is no terminal), only the answer.
    code, out, err = await osrdyne_cli(
        "call", pool, "bin", "--path", "progress", "--url", amqp_url, "--timeout", "60"
    )
    assert (code, out, err) == (0, b"done", "")
    # An error answer: its body on stdout, its status on stderr, exit status 1.
    code, out, err = await osrdyne_cli(
        "call", pool, "bin", "--path", "fail", "--url", amqp_url, "--timeout", "60"
    )
    assert code == 1 and json.loads(out)["status"] == Status.WORKER_ERROR
    assert err == f"status: {Status.WORKER_ERROR}\n"


LONG_KEY = "node-config-42-infra=123456789-timetable-98765-with-a-long-tail"


@pytest.mark.slow
async def test_status_fits_80_columns_with_whole_keys_and_the_json(
    make_controller: Any, serve_api: ServeApi, client: Client, pool: str
) -> None:
    running = await make_controller(pool)
    http = await serve_api(running, token="t0ken")
    for key in ("k1", LONG_KEY):
        assert (await client.call(pool, key, b"x", timeout=60)).ok
    session = running.controller.session
    await eventually(lambda: session.activity.last_seen.get("k1"), what="activity")
    base = ["status", "--api", str(http.base_url), "--token", "t0ken"]

    code, out, err = await osrdyne_cli(*base, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["pool"] == pool and doc["groups"]["k1"]["state"] == "active"
    assert doc["groups"]["k1"]["workers"][0]["pid"] > 0

    code, out, err = await osrdyne_cli(*base)
    assert code == 0, err
    text = out.decode()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for column in ("key", "state", "workers", "restarts", "exit", "ready", "activity"):
        assert column in lines[1]
    assert "oldest" not in text  # quorum queues do not report it: the column is left out
    first_column = "".join(line.split(" ", 1)[0] for line in lines[3:])
    assert LONG_KEY in first_column  # wrapped, never cut
    assert "k1" in text and "active" in text

    code, _, err = await osrdyne_cli("status", "--api", str(http.base_url), "--json")
    assert code == 2 and "refused" in err and len(err.splitlines()) == 1  # no token


@pytest.mark.slow
def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_watch_shows_the_pool_until_interrupted(
    make_controller: Any, client: Client, pool: str, tmp_path: Path
) -> None:
    running = await make_controller(pool)
    app = make_app(running.controller)
    polls: list[str] = []

    async def count(request: web.Request, response: web.StreamResponse) -> None:
        polls.append(request.path)

    app.on_response_prepare.append(count)
    server = ApiServer(app, host="127.0.0.1", port=0)
    await server.start()
    try:
        assert (await client.call(pool, "watched", b"x", timeout=60)).ok
        # Its screen goes to files, not pipes: nothing it writes can wait on the test reading.
        out_file, err_file = (
            (tmp_path / "watch.out").open("wb"),
            (tmp_path / "watch.err").open("wb"),
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "osrdyne",
            "watch",
            "--api",
            f"http://127.0.0.1:{server.port}",
            "--interval",
            "0.2",
            stdout=out_file,
            stderr=err_file,
            env={**os.environ, "COLUMNS": "80"},
            # Ctrl-C as a terminal sends it, whatever the run inherited: a suite started in
            # the background of a shell without job control ignores SIGINT, and so did this
            # child (a CI run here: killed after 30 s, its stderr empty).
            preexec_fn=_sigint_default,
        )
        out_file.close()
        err_file.close()
        try:
            # Interrupt only once it has refreshed a few times (it polls /status each time).
            await eventually(lambda: polls.count("/status") >= 3, what="watch refreshing")
        finally:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
    finally:
        await server.stop()
    out, err = (tmp_path / "watch.out").read_text(), (tmp_path / "watch.err").read_text()
    assert process.returncode == 0, f"exit {process.returncode} after SIGINT: {err[-3000:]}"
    assert "watched" in out and "active" in out


@pytest.mark.slow
async def test_poison_replay_runs_the_request_once_the_worker_is_fixed(
    make_controller: Callable[..., Awaitable[Running]],
    pool: str,
    amqp_url: str,
    tmp_path: Path,
) -> None:
    """The runbook: a request crashed its workers until the delivery limit, its caller's
    deadline passed; fix the worker, replay it: it runs, instead of being answered
    `expired`."""
    crashing = await make_controller(pool, queues={"delivery_limit": 1})
    async with Client(amqp_url) as client:
        assert (await client.call(pool, "k", b"warm", timeout=60)).ok
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        replies = await channel.declare_queue(exclusive=True)
        exchange = await channel.get_exchange(PoolNames(pool).request_exchange)
        # A budget long enough for the two crashes the delivery limit takes (past it, the
        # worker would answer `expired` instead of crashing).
        published = int(time.time())
        deadline = published + 10
        await exchange.publish(
            aio_pika.Message(
                b"please",
                headers={"x-rpc-path": "crash", "x-deadline": deadline * 1000},
                correlation_id="c1",
                reply_to=replies.name,
                timestamp=published,
            ),
            routing_key="k",
            mandatory=True,
        )
        first = await eventually(lambda: replies.get(fail=False), what="the poison answer")
        assert first.headers["x-status"] == Status.DELIVERY_LIMIT
        entries = await poison.list_entries(amqp_url, pool)
        assert len(entries) == 1
        await crashing.stop()
        await eventually(lambda: time.time() > deadline + 0.5, what="the deadline passed")

        # The fixed worker: `crash` answers instead of exiting.
        fixed = tmp_path / "fixed_worker.py"
        fixed.write_text(
            "from worker_sdk import Worker\n"
            "worker = Worker()\n"
            "@worker.handler('crash')\n"
            "async def crash(request):\n"
            "    return b'fixed: ' + request.body\n"
            "worker.run()\n"
        )
        config = settings_dict(pool, tmp_path / "fixed-workers")
        config["driver"]["subprocess"]["command"] = [sys.executable, str(fixed)]
        path = write_toml(tmp_path / "fixed.toml", tomli_w.dumps(config))
        controller = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "osrdyne", "run", "--config", path, stderr=asyncio.subprocess.PIPE
        )
        try:
            # The fixed group running first: the replay's 10 s budget is for the request, not
            # for a controller and a worker to start on a loaded machine.
            async with Client(amqp_url) as client:
                assert (await client.call(pool, "k", b"warm", path="crash", timeout=120)).ok
            code, out, err = await osrdyne_cli("poison", "replay", pool, entries[0].id)
            assert code == 0, err
            assert f"replayed {entries[0].id} to key 'k' with a fresh deadline 10s from now" in (
                out.decode()
            )
            answer = await eventually(lambda: replies.get(fail=False), timeout=60, what="answer")
        finally:
            controller.send_signal(signal.SIGTERM)
            await asyncio.wait_for(controller.communicate(), 60)
    assert answer.correlation_id == "c1"
    assert answer.headers["x-status"] == Status.OK and answer.body == b"fixed: please"
    assert await poison.list_entries(amqp_url, pool) == []


@pytest.mark.slow
async def test_run_with_json_logs_makes_its_workers_log_json(
    pool: str, tmp_path: Path, amqp_url: str
) -> None:
    """`log.json = true`: every line on the controller's stderr is JSON, its workers' too."""
    config = settings_dict(pool, tmp_path / "workers", log={"json": True})
    path = write_toml(tmp_path / "json.toml", tomli_w.dumps(config))
    controller = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "osrdyne", "run", "--config", path, stderr=asyncio.subprocess.PIPE
    )
    try:
        await eventually(lambda: broker.pool_declared(pool), what="controller up")
        async with Client(amqp_url) as client:
            assert (await client.call(pool, "logged", b"x", timeout=90)).ok
            failed = await client.call(pool, "logged", b"x", path="no-such-path", timeout=30)
            assert failed.status == Status.WORKER_ERROR
    finally:
        controller.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(controller.communicate(), 60)
    lines = [line for line in err.decode().splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    workers = [p for p in parsed if p.get("logger", "").startswith("worker_sdk")]
    assert any("started for key 'logged'" in p["event"] for p in workers), lines
    assert any(p["event"].startswith("controller of pool") for p in parsed)
