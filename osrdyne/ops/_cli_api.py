"""The `osrdyne` commands that talk to a controller's HTTP API (`status`, `watch`, `warm`,
`stop`): what the operator console shows and does, from a terminal.

They are plain functions; `cli` registers them on the `osrdyne` command, in the order its help
lists them.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pydantic
import typer

from osrdyne.controller import GroupSort, StatusDocument
from osrdyne.ops import _cli_common, logs

ApiOption = Annotated[str, typer.Option(help="Base URL of the controller's HTTP API.")]
TokenOption = Annotated[
    str | None, typer.Option(envvar="OSRDYNE_API__TOKEN", help="Bearer token of the API.")
]


LimitOption = Annotated[
    int | None,
    typer.Option(min=0, help="Most groups shown (the busiest first with --sort messages)."),
]
SortOption = Annotated[
    GroupSort, typer.Option(help="Order of the groups: key, messages, activity, state.")
]
KeyOption = Annotated[str | None, typer.Option("--key", help="Only keys containing this.")]


def status(
    api: ApiOption = "http://127.0.0.1:8090",
    token: TokenOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status document.")] = False,
    limit: LimitOption = None,
    sort: SortOption = GroupSort.KEY,
    key: KeyOption = None,
) -> None:
    """Show the pool: role, generations, each group's state, workers and queue."""
    with _cli_common.answering():
        doc = _get_status(api, token, _query(limit, sort, key))
    if as_json:
        typer.echo(doc.model_dump_json(indent=2))
        return
    from rich.console import Console

    from osrdyne.ops import _status_table

    Console().print(_status_table.render(doc))


def watch(
    api: ApiOption = "http://127.0.0.1:8090",
    token: TokenOption = None,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 2.0,
    limit: LimitOption = 40,
    sort: SortOption = GroupSort.MESSAGES,
    key: KeyOption = None,
) -> None:
    """Show the pool like `status`, refreshed live until Ctrl-C (the 40 busiest groups unless
    told otherwise: it asks the controller for no more than it shows)."""
    import time

    from rich.live import Live
    from rich.text import Text

    from osrdyne.ops import _status_table

    def render() -> Any:
        try:
            return _status_table.render(_get_status(api, token, _query(limit, sort, key)))
        except _cli_common.Failure as failure:
            return Text(f"{failure.message} (retrying every {interval:g}s)", overflow="fold")

    try:
        with Live(render(), auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(), refresh=True)
    except KeyboardInterrupt:
        pass


def _query(limit: int | None, sort: GroupSort, key: str | None) -> dict[str, str]:
    """The status query for these options (only what differs from the defaults)."""
    query = {"sort": sort.value} if sort is not GroupSort.KEY else {}
    if limit is not None:
        query["limit"] = str(limit)
    if key:
        query["key"] = key
    return query


def _get_status(api: str, token: str | None, query: dict[str, str] | None = None) -> StatusDocument:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    where = f"{api.rstrip('/')}/status"
    try:
        response = httpx.get(where, headers=headers, params=query or {}, timeout=10)
    except httpx.HTTPError as exc:
        raise _cli_common.Failure(
            f"cannot reach the controller's API at {api}: {exc}",
            "is `osrdyne run` serving its API there? Set --api",
        ) from exc
    if response.status_code in (401, 403):
        raise _cli_common.Failure(
            f"the API at {api} refused the request ({response.status_code})",
            "pass its token with --token or OSRDYNE_API__TOKEN",
        )
    if response.status_code != 200:
        raise _cli_common.Failure(
            f"the API at {api} answered {response.status_code} to GET /status"
        )
    try:
        return StatusDocument.model_validate_json(response.content)
    except pydantic.ValidationError as exc:
        raise _cli_common.Failure(
            f"{where} did not answer a status document ({exc.error_count()} error(s))",
            "is --api the address of an osrdyne controller of this version?",
        ) from exc


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
    with _cli_common.answering():
        doc = _act(api, token, "warm", {"key": key})
        typer.echo(f"warmed {key!r}: queue {doc.get('queue')}, generation {doc.get('generation')}")
        if wait:
            _wait_consumed(api, token, key, timeout)


def stop_command(
    key: str, api: ApiOption = "http://127.0.0.1:8090", token: TokenOption = None
) -> None:
    """Stop KEY's worker group now: its queue is unbound at once, its workers stopped after
    `groups.stop_drain` seconds (a request before then brings it back)."""
    with _cli_common.answering():
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
        raise _cli_common.Failure(
            f"cannot reach {api}: {exc}", "is --api the address of the controller's API?"
        ) from exc
    if response.status_code == 401:
        raise _cli_common.Failure(f"{api} wants a token", "give --token or set OSRDYNE_API__TOKEN")
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
    raise _cli_common.Failure(f"{action} refused: {message}", code=1)


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
    raise _cli_common.Failure(
        f"no worker of {key!r} consumes its queue after {timeout:.0f}s",
        "look at the group with `osrdyne status`",
        code=1,
    )
