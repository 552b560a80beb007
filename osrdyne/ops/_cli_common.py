"""What every `osrdyne` command shares: how it answers a mistake (one line on stderr, `error:`
and a hint, exit status 2; the traceback with `--debug`), its help's look (flags without a
`<bool>`), and the options several commands take (`--url`).

Kept apart from `cli` so that the commands talking to the controller's HTTP API
(`_cli_api`) and the poison sub-commands (`_cli_poison`) use the same helpers without
importing the command module that registers them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import aio_pika.exceptions
import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from drivers.base import DriverConfigurationError
from osrdyne import exceptions
from osrdyne.ops import logs

#: Where the documentation is, for hints.
DOCS = "docs"


def _plain_flags(params: list[Any]) -> list[Any]:
    """Boolean flags take no value: show none in the help (typer shows `<bool>`)."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


class Failure(Exception):
    """A mistake the command explains in one line (and exits with `code`)."""

    def __init__(self, message: str, hint: str | None = None, *, code: int = 2) -> None:
        super().__init__(message)
        self.message, self.hint, self.code = message, hint, code


class State:
    """Set by the global callback: `--debug` shows tracebacks instead of one line."""

    debug = False


def failure(exc: BaseException) -> Failure:
    """What to tell the user about `exc`."""
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, exceptions.ConfigurationError):
        return Failure(str(exc), f"every option is in {DOCS}/configuration.md")
    if isinstance(exc, DriverConfigurationError):
        return Failure(str(exc), f"see {DOCS}/drivers.md")
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
def answering() -> Iterator[None]:
    """Turn every error of a command into one line and an exit status (not with --debug)."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        if State.debug:
            raise
        told = failure(exc)
        hint = f" (hint: {told.hint})" if told.hint else ""
        typer.echo(logs.redact(f"error: {told.message}{hint}"), err=True)
        raise typer.Exit(told.code) from None


@contextlib.contextmanager
def broker(url: str) -> Iterator[None]:
    """Say "cannot reach the broker" for a connection failure, and nothing else."""
    try:
        yield
    except (aio_pika.exceptions.AMQPConnectionError, ConnectionError, OSError) as exc:
        raise Failure(
            f"cannot reach the broker at {logs.redact(url)}: {exc}",
            "is RabbitMQ running there? Set --url or OSRDYNE_AMQP__URL",
        ) from exc


UrlOption = Annotated[
    str,
    typer.Option(
        envvar="OSRDYNE_AMQP__URL",
        help="AMQP URI; the nodes of a cluster comma-separated (the first that answers).",
    ),
]
