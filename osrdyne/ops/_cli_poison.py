"""`osrdyne poison`: list, replay and drop the requests parked in a pool's poison queue
(the delivery limit, or refused as sent), straight on the broker.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from osrdyne.ops import _cli_common
from osrdyne.wire import DEFAULT_URL

app = typer.Typer(
    cls=_cli_common.Group,
    help="Requests parked in P-poison: the delivery limit, or refused as sent.",
)


@app.command("list", cls=_cli_common.Command)
def poison_list(pool: str, url: _cli_common.UrlOption = DEFAULT_URL) -> None:
    """List the poison requests of POOL."""
    from osrdyne.controller import poison

    with _cli_common.answering(), _cli_common.broker(url):
        entries = asyncio.run(poison.list_entries(url, pool))
    if not entries:
        typer.echo(f"no poison requests in pool {pool!r}")
    for entry in entries:
        typer.echo(
            f"{entry.id}  key={entry.key!r}  reason={entry.reason!r}  deaths={entry.deaths}  "
            f"size={entry.size}B  "
            f"request_id={entry.request_id}  correlation_id={entry.correlation_id}"
        )


@app.command("replay", cls=_cli_common.Command)
def poison_replay(
    pool: str,
    entry_id: str,
    url: _cli_common.UrlOption = DEFAULT_URL,
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

    with _cli_common.answering(), _cli_common.broker(url):
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


@app.command("drop", cls=_cli_common.Command)
def poison_drop(pool: str, entry_id: str, url: _cli_common.UrlOption = DEFAULT_URL) -> None:
    """Delete poison request ENTRY_ID for good."""
    from osrdyne.controller import poison

    with _cli_common.answering(), _cli_common.broker(url):
        entry = asyncio.run(poison.drop(url, pool, entry_id))
    if entry is None:
        typer.echo(f"error: no poison request {entry_id!r} in pool {pool!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"dropped {entry.id} (key {entry.key!r})")
