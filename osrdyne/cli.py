"""The `osrdyne` command: run a pool's controller, call a worker, look at a pool."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import aio_pika.exceptions
import httpx
import typer

from osrdyne import logs
from osrdyne.client import Client
from osrdyne.exceptions import ClientError
from osrdyne.response import Response
from osrdyne.settings import Settings

app = typer.Typer(
    help="osrdyne: keyed RPC worker groups on RabbitMQ.",
    no_args_is_help=True,
    # Tracebacks never show local variables: they hold the AMQP URL and its password
    # (typer 0.12 showed them by default).
    pretty_exceptions_show_locals=False,
)

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML configuration file.")
    ] = None,
) -> None:
    """Run the controller of one pool until SIGTERM/SIGINT."""
    settings = Settings.load(config)
    logs.configure(level=settings.log.level, json_format=settings.log.json_format)
    asyncio.run(_run(settings))


async def _run(settings: Settings) -> None:
    from osrdyne.api import ApiServer, make_app
    from osrdyne.controller import Controller

    controller = Controller(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.stop)
    server = None
    if settings.api.enabled:
        server = ApiServer(
            make_app(controller, token=settings.api.token),
            host=settings.api.host,
            port=settings.api.port,
        )
        await server.start()
    try:
        await controller.run()
    finally:
        if server is not None:
            await server.stop()


def _read_data(data: str | None) -> bytes:
    if data is None:
        return b""
    if data == "-":
        return sys.stdin.buffer.read()
    if data.startswith("@"):
        return Path(data[1:]).read_bytes()
    return data.encode()


@app.command()
def call(
    pool: str,
    key: str,
    data: Annotated[
        str | None, typer.Option("--data", "-d", help="Body; @FILE reads a file, - stdin.")
    ] = None,
    path: Annotated[str | None, typer.Option(help="Endpoint (x-rpc-path).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 30.0,
    url: Annotated[str, typer.Option(envvar="OSRDYNE_AMQP__URL", help="AMQP URI.")] = DEFAULT_URL,
    show_headers: Annotated[bool, typer.Option("--headers", help="Print headers.")] = False,
) -> None:
    """Send one request and print its answer; progress messages show as a progress bar."""
    try:
        response = asyncio.run(_call(url, pool, key, _read_data(data), path, timeout))
    except ClientError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (ConnectionError, OSError, aio_pika.exceptions.AMQPError) as exc:
        typer.echo(f"error: cannot reach the broker: {logs.redact(str(exc))}", err=True)
        raise typer.Exit(2) from exc
    if show_headers:
        typer.echo(json.dumps({k: _plain(v) for k, v in response.headers.items()}), err=True)
    sys.stdout.buffer.write(response.body + (b"" if response.body.endswith(b"\n") else b"\n"))
    if not response.ok:
        typer.echo(f"status: {response.status}", err=True)
        raise typer.Exit(1)


async def _call(
    url: str, pool: str, key: str, body: bytes, path: str | None, timeout: float
) -> Response:
    from rich.progress import Progress

    async with Client(url, name="osrdyne call") as client:
        with Progress(transient=True) as progress:
            task = progress.add_task(f"{pool}/{key}", total=None)

            def on_progress(interim: Response) -> None:
                try:
                    doc = interim.json()
                except ValueError:
                    doc = None
                if isinstance(doc, dict) and {"step", "of"} <= doc.keys():
                    progress.update(task, completed=doc["step"], total=doc["of"])
                else:
                    progress.console.print(interim.text)

            return await client.call(
                pool, key, body, path=path, timeout=timeout, on_progress=on_progress
            )


def _plain(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@app.command()
def status(
    api: Annotated[str, typer.Option(help="Base URL of the controller's HTTP API.")] = (
        "http://127.0.0.1:8090"
    ),
    token: Annotated[str | None, typer.Option(envvar="OSRDYNE_API__TOKEN")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
) -> None:
    """Show the pool: role, generations, each group's state, workers and queue."""
    doc = _fetch_status(api, token)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    from rich.console import Console

    Console().print(_status_table(doc))


@app.command()
def watch(
    api: Annotated[str, typer.Option(help="Base URL of the controller's HTTP API.")] = (
        "http://127.0.0.1:8090"
    ),
    token: Annotated[str | None, typer.Option(envvar="OSRDYNE_API__TOKEN")] = None,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 2.0,
) -> None:
    """Show the pool like `status`, refreshed live until Ctrl-C."""
    import time

    from rich.live import Live
    from rich.text import Text

    def render() -> Any:
        try:
            return _status_table(_get_status(api, token))
        except (httpx.HTTPError, ValueError) as exc:
            return Text(f"cannot reach {api}: {exc} (retrying)")

    try:
        with Live(render(), auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(), refresh=True)
    except KeyboardInterrupt:
        pass


def _get_status(api: str, token: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{api.rstrip('/')}/status", headers=headers, timeout=10)
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


def _fetch_status(api: str, token: str | None) -> dict[str, Any]:
    try:
        return _get_status(api, token)
    except httpx.HTTPError as exc:
        typer.echo(f"error: cannot reach {api}: {exc}", err=True)
        raise typer.Exit(2) from exc


def _ago(seconds: float | None, now: float) -> str:
    if seconds is None:
        return "-"
    return f"{max(0.0, now - seconds):.0f}s ago"


def _status_table(doc: dict[str, Any]) -> Any:
    import time

    from rich.table import Table

    gens = doc.get("generations", {})
    title = (
        f"pool {doc['pool']} - {doc['role']} - generation tracker {gens.get('tracker', '-')}, "
        f"queues {gens.get('queues', '-')}, groups {gens.get('groups', '-')}"
    )
    table = Table(title=title)
    columns = (
        "key state queue running workers restarts ready unacked consumers oldest activity error"
    )
    for column in columns.split():
        table.add_column(column)
    now = float(doc.get("time") or time.time())
    for key, group in doc.get("groups", {}).items():
        workers = group.get("workers")
        pids = "-" if workers is None else ",".join(str(w.get("pid") or "?") for w in workers)
        age = group.get("oldest_message_age")
        table.add_row(
            key,
            str(group.get("state")),
            str(group.get("queue")),
            str(group.get("running")),
            pids or "-",
            str(group.get("restarts", "-")),
            str(group.get("messages_ready", "-")),
            str(group.get("messages_unacknowledged", "-")),
            str(group.get("consumers", "-")),
            "-" if age is None else f"{age:.0f}s",
            _ago(group.get("last_activity"), now),
            str(group.get("error") or ""),
        )
    return table


poison_app = typer.Typer(help="Requests that reached the delivery limit, kept in P-poison.")
app.add_typer(poison_app, name="poison")

UrlOption = Annotated[str, typer.Option(envvar="OSRDYNE_AMQP__URL", help="AMQP URI.")]


@poison_app.command("list")
def poison_list(pool: str, url: UrlOption = DEFAULT_URL) -> None:
    """List the poison requests of POOL."""
    from osrdyne import poison

    entries = asyncio.run(poison.list_entries(url, pool))
    if not entries:
        typer.echo(f"no poison requests in pool {pool!r}")
    for entry in entries:
        typer.echo(
            f"{entry.id}  key={entry.key!r}  deaths={entry.deaths}  size={entry.size}B  "
            f"correlation_id={entry.correlation_id}"
        )


@poison_app.command("replay")
def poison_replay(pool: str, entry_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Publish poison request ENTRY_ID back to its worker group."""
    from osrdyne import poison

    entry = asyncio.run(poison.replay(url, pool, entry_id))
    if entry is None:
        typer.echo(f"no poison request {entry_id!r} in pool {pool!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"replayed {entry.id} to key {entry.key!r}")


@poison_app.command("drop")
def poison_drop(pool: str, entry_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Delete poison request ENTRY_ID for good."""
    from osrdyne import poison

    entry = asyncio.run(poison.drop(url, pool, entry_id))
    if entry is None:
        typer.echo(f"no poison request {entry_id!r} in pool {pool!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"dropped {entry.id} (key {entry.key!r})")
