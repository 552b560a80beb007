"""The `osrdyne` command: run a pool's controller, call a worker, look at a pool, act on a key
(`warm`, `stop`: through the controller's HTTP API, like the console's buttons).

It answers like a Unix tool: a mistake (a missing or invalid configuration, an unreachable
broker or API, an unknown pool, an unreadable body file) is one line on stderr, `error:` and
a hint, with exit status 2 (`--debug` shows the traceback instead); `call` writes the answer's
bytes, untouched, to stdout and exits 1 when the answer is not `ok`; progress goes to stderr,
and only when stderr is a terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import aio_pika.exceptions
import httpx
import pydantic
import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from drivers.base import DriverConfigurationError
from osrdyne import exceptions
from osrdyne.client import Client, Response
from osrdyne.controller import Settings, StatusDocument
from osrdyne.ops import logs
from osrdyne.wire import DEFAULT_URL

#: Where the documentation is, for hints.
_DOCS = "docs"


def _plain_flags(params: list[Any]) -> list[Any]:
    """Boolean flags take no value: show none in the help (typer shows `<bool>`)."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


app = typer.Typer(
    cls=_Group,
    help="osrdyne: keyed RPC worker groups on RabbitMQ.",
    no_args_is_help=True,
    # Tracebacks never show local variables: they hold the AMQP URL and its password.
    pretty_exceptions_show_locals=False,
)


class Failure(Exception):
    """A mistake the command explains in one line (and exits with `code`)."""

    def __init__(self, message: str, hint: str | None = None, *, code: int = 2) -> None:
        super().__init__(message)
        self.message, self.hint, self.code = message, hint, code


class _State:
    debug = False


def _failure(exc: BaseException) -> Failure:
    """What to tell the user about `exc`."""
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, exceptions.ConfigurationError):
        return Failure(str(exc), f"every option is in {_DOCS}/configuration.md")
    if isinstance(exc, DriverConfigurationError):
        return Failure(str(exc), f"see {_DOCS}/drivers.md")
    if isinstance(exc, exceptions.PoolNotFound):
        return Failure(str(exc), "check the pool name, and that `osrdyne run` runs for it")
    if isinstance(exc, exceptions.RequestTimeout):
        return Failure(str(exc), "raise --timeout, or look at the pool with `osrdyne status`")
    if isinstance(exc, exceptions.OsrdyneError):
        return Failure(str(exc))
    return Failure(
        f"unexpected {type(exc).__name__}: {exc}", "rerun with --debug for the traceback"
    )


@contextlib.contextmanager
def _answering() -> Iterator[None]:
    """Turn every error of a command into one line and an exit status (not with --debug)."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        if _State.debug:
            raise
        failure = _failure(exc)
        hint = f" (hint: {failure.hint})" if failure.hint else ""
        typer.echo(logs.redact(f"error: {failure.message}{hint}"), err=True)
        raise typer.Exit(failure.code) from None


@contextlib.contextmanager
def _broker(url: str) -> Iterator[None]:
    """Say "cannot reach the broker" for a connection failure, and nothing else."""
    try:
        yield
    except (aio_pika.exceptions.AMQPConnectionError, ConnectionError, OSError) as exc:
        raise Failure(
            f"cannot reach the broker at {logs.redact(url)}: {exc}",
            "is RabbitMQ running there? Set --url or OSRDYNE_AMQP__URL",
        ) from exc


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
    _State.debug = debug
    if not debug:
        # The AMQP libraries log their own failures (e.g. "error when creating transport")
        # before the command explains them in one line; `run` sets up logging anew.
        for noisy in ("aiormq", "aio_pika"):
            logging.getLogger(noisy).setLevel(logging.CRITICAL)


@app.command(cls=_Command)
def run(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML configuration file.")
    ] = None,
) -> None:
    """Run the controller of one pool until SIGTERM/SIGINT."""
    with _answering():
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
            raise Failure(
                f"cannot read the request body from {data[1:]!r}: {exc.strerror or exc}",
                "--data @FILE reads FILE; --data - reads stdin",
            ) from exc
    return data.encode()


UrlOption = Annotated[
    str,
    typer.Option(
        envvar="OSRDYNE_AMQP__URL",
        help="AMQP URI; the nodes of a cluster comma-separated (the first that answers).",
    ),
]


@app.command(cls=_Command)
def call(
    pool: str,
    key: str,
    data: Annotated[
        str | None, typer.Option("--data", "-d", help="Body; @FILE reads a file, - stdin.")
    ] = None,
    path: Annotated[str | None, typer.Option(help="Endpoint (x-rpc-path).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 30.0,
    url: UrlOption = DEFAULT_URL,
    show_headers: Annotated[
        bool, typer.Option("--headers", help="Print the answer's headers (JSON) on stderr.")
    ] = False,
) -> None:
    """Send one request and write its answer's body to stdout, byte for byte.

    Exits 1 when the answer is not `ok` (its status goes to stderr). Progress messages show
    as a progress bar on stderr when it is a terminal."""
    with _answering():
        body = _read_data(data)
        with _broker(url):
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


ApiOption = Annotated[str, typer.Option(help="Base URL of the controller's HTTP API.")]
TokenOption = Annotated[
    str | None, typer.Option(envvar="OSRDYNE_API__TOKEN", help="Bearer token of the API.")
]


@app.command(cls=_Command)
def status(
    api: ApiOption = "http://127.0.0.1:8090",
    token: TokenOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status document.")] = False,
) -> None:
    """Show the pool: role, generations, each group's state, workers and queue."""
    with _answering():
        doc = _get_status(api, token)
    if as_json:
        typer.echo(doc.model_dump_json(indent=2))
        return
    from rich.console import Console

    from osrdyne.ops import _status_table

    Console().print(_status_table.render(doc))


@app.command(cls=_Command)
def watch(
    api: ApiOption = "http://127.0.0.1:8090",
    token: TokenOption = None,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 2.0,
) -> None:
    """Show the pool like `status`, refreshed live until Ctrl-C."""
    import time

    from rich.live import Live
    from rich.text import Text

    from osrdyne.ops import _status_table

    def render() -> Any:
        try:
            return _status_table.render(_get_status(api, token))
        except Failure as failure:
            return Text(f"{failure.message} (retrying every {interval:g}s)", overflow="fold")

    try:
        with Live(render(), auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(), refresh=True)
    except KeyboardInterrupt:
        pass


def _get_status(api: str, token: str | None) -> StatusDocument:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    where = f"{api.rstrip('/')}/status"
    try:
        response = httpx.get(where, headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise Failure(
            f"cannot reach the controller's API at {api}: {exc}",
            "is `osrdyne run` serving its API there? Set --api",
        ) from exc
    if response.status_code in (401, 403):
        raise Failure(
            f"the API at {api} refused the request ({response.status_code})",
            "pass its token with --token or OSRDYNE_API__TOKEN",
        )
    if response.status_code != 200:
        raise Failure(f"the API at {api} answered {response.status_code} to GET /status")
    try:
        return StatusDocument.model_validate_json(response.content)
    except pydantic.ValidationError as exc:
        raise Failure(
            f"{where} did not answer a status document ({exc.error_count()} error(s))",
            "is --api the address of an osrdyne controller of this version?",
        ) from exc


@app.command("warm", cls=_Command)
def warm_command(
    key: str,
    api: ApiOption = "http://127.0.0.1:8090",
    token: TokenOption = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until a worker of the group consumes its queue.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 120.0,
) -> None:
    """Start KEY's worker group now, before its first request (as its first request would)."""
    with _answering():
        doc = _act(api, token, "warm", {"key": key})
        typer.echo(f"warmed {key!r}: queue {doc.get('queue')}, generation {doc.get('generation')}")
        if wait:
            _wait_consumed(api, token, key, timeout)


@app.command("stop", cls=_Command)
def stop_command(
    key: str, api: ApiOption = "http://127.0.0.1:8090", token: TokenOption = None
) -> None:
    """Stop KEY's worker group now: its queue is unbound at once, its workers stopped after
    `groups.stop_drain` seconds (a request before then brings it back)."""
    with _answering():
        doc = _act(api, token, "stop", {"key": key})
    typer.echo(f"stopping {key!r}: unbound now, workers stop in {doc.get('stops_in', 0):.0f}s")


def _act(api: str, token: str | None, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST an action to the controller's API; exit 1 when it refuses, 2 when unreachable."""
    headers = {"X-Osrdyne-Action": "cli"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    url = f"{api.rstrip('/')}/actions/{action}"
    try:
        response = httpx.post(url, json=body, headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        raise Failure(
            f"cannot reach {api}: {exc}", "is --api the address of the controller's API?"
        ) from exc
    if response.status_code == 401:
        raise Failure(f"{api} wants a token", "give --token or set OSRDYNE_API__TOKEN")
    try:
        doc: dict[str, Any] = response.json()
    except ValueError:
        doc = {"error": response.text.strip()}
    if response.is_success:
        return doc
    message = logs.escape_controls(str(doc.get("error") or f"HTTP {response.status_code}"))
    leader = doc.get("leader")
    if isinstance(leader, dict):
        where = f" at {leader.get('api')}" if leader.get("api") else ""
        message += f" (the leader is {leader.get('instance')}{where})"
    raise Failure(f"{action} refused: {message}", code=1)


def _wait_consumed(api: str, token: str | None, key: str, timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            group = _get_status(api, token).groups.get(key)
        except (httpx.HTTPError, pydantic.ValidationError):
            group = None
        if group is not None and (group.consumers or 0) > 0:
            typer.echo(f"{key!r}: {group.consumers} worker(s) consuming")
            return
        time.sleep(0.5)
    raise Failure(
        f"no worker of {key!r} consumes its queue after {timeout:.0f}s",
        "look at the group with `osrdyne status`",
        code=1,
    )


@app.command("roles", cls=_Command)
def roles_command(
    pool: str,
    vhost: Annotated[str, typer.Option(help="The pool's virtual host.")] = "/",
) -> None:
    """Print the rabbitmqctl commands creating POOL's users: controller, worker, client, each
    with the narrowest permissions (docs/security.md)."""
    from osrdyne.ops import roles

    for line in roles.rabbitmqctl(pool, vhost=vhost):
        typer.echo(line)


poison_app = typer.Typer(
    cls=_Group, help="Requests parked in P-poison: the delivery limit, or refused as sent."
)
app.add_typer(poison_app, name="poison")


@poison_app.command("list", cls=_Command)
def poison_list(pool: str, url: UrlOption = DEFAULT_URL) -> None:
    """List the poison requests of POOL."""
    from osrdyne.controller import poison

    with _answering(), _broker(url):
        entries = asyncio.run(poison.list_entries(url, pool))
    if not entries:
        typer.echo(f"no poison requests in pool {pool!r}")
    for entry in entries:
        typer.echo(
            f"{entry.id}  key={entry.key!r}  reason={entry.reason!r}  deaths={entry.deaths}  "
            f"size={entry.size}B  "
            f"correlation_id={entry.correlation_id}"
        )


@poison_app.command("replay", cls=_Command)
def poison_replay(
    pool: str,
    entry_id: str,
    url: UrlOption = DEFAULT_URL,
    keep_deadline: Annotated[
        bool,
        typer.Option(
            "--keep-deadline",
            help="Keep the request's original deadline (a passed one: answered `expired`).",
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Give the request this many seconds from now (default: its original time budget)."
        ),
    ] = None,
) -> None:
    """Publish poison request ENTRY_ID back to its worker group, with a fresh deadline."""
    import time

    from osrdyne.controller import poison

    with _answering(), _broker(url):
        done = asyncio.run(
            poison.replay(url, pool, entry_id, keep_deadline=keep_deadline, budget=timeout)
        )
    if done is None:
        typer.echo(f"error: no poison request {entry_id!r} in pool {pool!r}", err=True)
        raise typer.Exit(1)
    entry = done.entry
    if done.deadline is None:
        how = "without a deadline (its time budget is unknown: --timeout gives one)"
    elif done.kept:
        left = done.deadline - time.time()
        how = (
            f"keeping its deadline, {left:.0f}s from now"
            if left > 0
            else f"keeping its deadline, passed {-left:.0f}s ago: it will be answered expired"
        )
    else:
        origin = "--timeout" if timeout is not None else "its original budget"
        how = f"with a fresh deadline {done.budget:.0f}s from now ({origin})"
    typer.echo(f"replayed {entry.id} to key {entry.key!r} {how}")


@poison_app.command("drop", cls=_Command)
def poison_drop(pool: str, entry_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Delete poison request ENTRY_ID for good."""
    from osrdyne.controller import poison

    with _answering(), _broker(url):
        entry = asyncio.run(poison.drop(url, pool, entry_id))
    if entry is None:
        typer.echo(f"error: no poison request {entry_id!r} in pool {pool!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"dropped {entry.id} (key {entry.key!r})")
