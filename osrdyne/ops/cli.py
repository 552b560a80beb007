"""The `osrdyne` command: run a pool's controller, call a worker, look at a pool, act on a key
(`warm`, `stop`: through the controller's HTTP API, like the console's buttons).

It answers like a Unix tool: a mistake (a missing or invalid configuration, an unreachable
broker or API, an unknown pool, an unreadable body file) is one line on stderr, `error:` and
a hint, with exit status 2 (`--debug` shows the traceback instead); `call` writes the answer's
bytes, untouched, to stdout and exits 1 when the answer is not `ok`; progress goes to stderr,
and only when stderr is a terminal.

This module holds the `osrdyne` command itself, its global options, and the commands that
talk to the broker directly (`run`, `call`, `roles`); the commands of the controller's HTTP
API are in `_cli_api`, the poison sub-commands in `_cli_poison`, what they all share (how a
mistake is answered, the help's look, `--url`) in `_cli_common`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from osrdyne.client import Client, Response
from osrdyne.controller import Settings
from osrdyne.ops import _cli_api, _cli_common, _cli_poison, logs
from osrdyne.wire import DEFAULT_URL

app = typer.Typer(
    cls=_cli_common.Group,
    help="osrdyne: keyed RPC worker groups on RabbitMQ.",
    no_args_is_help=True,
    # Tracebacks never show local variables: they hold the AMQP URL and its password.
    pretty_exceptions_show_locals=False,
)


def _print_version(value: bool) -> None:
    if value:
        import osrdyne

        typer.echo(f"osrdyne {osrdyne.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of an error, not one line.")
    ] = False,
) -> None:
    """osrdyne: keyed RPC worker groups on RabbitMQ."""
    _cli_common.State.debug = debug
    if not debug:
        # The AMQP libraries log their own failures (e.g. "error when creating transport")
        # before the command explains them in one line; `run` sets up logging anew.
        for noisy in ("aiormq", "aio_pika"):
            logging.getLogger(noisy).setLevel(logging.CRITICAL)


@app.command(cls=_cli_common.Command)
def run(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML configuration file.")
    ] = None,
) -> None:
    """Run the controller of one pool until SIGTERM/SIGINT."""
    with _cli_common.answering():
        settings = Settings.load(config)
        logs.configure(level=settings.log.level, json_format=settings.log.json_format)
        if settings.log.json_format:
            # Workers started on this machine (subprocess driver) inherit the environment:
            # their lines then read like the controller's.
            os.environ.setdefault("WORKER_LOG_JSON", "true")
        asyncio.run(_run(settings))


async def _run(settings: Settings) -> None:
    from osrdyne.controller import Controller
    from osrdyne.ops._api import ApiServer, make_app

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
        controller.api_url = settings.api.advertise_url or server.url
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
        try:
            return Path(data[1:]).read_bytes()
        except OSError as exc:
            raise _cli_common.Failure(
                f"cannot read the request body from {data[1:]!r}: {exc.strerror or exc}",
                "--data @FILE reads FILE; --data - reads stdin",
            ) from exc
    return data.encode()


@app.command(cls=_cli_common.Command)
def call(
    pool: str,
    key: str,
    data: Annotated[
        str | None, typer.Option("--data", "-d", help="Body; @FILE reads a file, - stdin.")
    ] = None,
    path: Annotated[str | None, typer.Option(help="Endpoint (x-rpc-path).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 30.0,
    url: _cli_common.UrlOption = DEFAULT_URL,
    show_headers: Annotated[
        bool, typer.Option("--headers", help="Print the answer's headers (JSON) on stderr.")
    ] = False,
) -> None:
    """Send one request and write its answer's body to stdout, byte for byte.

    Exits 1 when the answer is not `ok` (its status goes to stderr). Progress messages show
    as a progress bar on stderr when it is a terminal."""
    with _cli_common.answering():
        body = _read_data(data)
        with _cli_common.broker(url):
            response = asyncio.run(_call(url, pool, key, body, path, timeout))
    if show_headers:
        typer.echo(json.dumps({k: _plain(v) for k, v in response.headers.items()}), err=True)
    out = sys.stdout.buffer
    out.write(response.body)
    if sys.stdout.isatty() and not response.body.endswith(b"\n"):
        out.write(b"\n")  # for the prompt's sake; never into a file or a pipe
    out.flush()
    if not response.ok:
        typer.echo(f"status: {response.status}", err=True)
        raise typer.Exit(1)


async def _call(
    url: str, pool: str, key: str, body: bytes, path: str | None, timeout: float
) -> Response:
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    async with Client(url, name="osrdyne call") as client:
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task(f"{pool}/{key}", total=None)

            def on_progress(interim: Response) -> None:
                try:
                    doc = interim.json()
                except ValueError:
                    doc = None
                if isinstance(doc, dict) and {"step", "of"} <= doc.keys():
                    bar.update(task, completed=doc["step"], total=doc["of"])
                elif console.is_terminal:
                    bar.console.print(interim.text, markup=False, highlight=False)

            return await client.call(
                pool, key, body, path=path, timeout=timeout, on_progress=on_progress
            )


def _plain(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# The commands that talk to the controller's HTTP API, in the order the help lists them.
app.command(cls=_cli_common.Command)(_cli_api.status)
app.command(cls=_cli_common.Command)(_cli_api.watch)
app.command("warm", cls=_cli_common.Command)(_cli_api.warm_command)
app.command("stop", cls=_cli_common.Command)(_cli_api.stop_command)


@app.command("roles", cls=_cli_common.Command)
def roles_command(
    pool: str,
    vhost: Annotated[str, typer.Option(help="The pool's virtual host.")] = "/",
) -> None:
    """Print the rabbitmqctl commands creating POOL's users: controller, worker, client, each
    with the narrowest permissions (docs/security.md)."""
    from osrdyne.ops import roles

    for line in roles.rabbitmqctl(pool, vhost=vhost):
        typer.echo(line)


app.add_typer(_cli_poison.app, name="poison")
