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

from osrdyne.controller import StatusDocument
from osrdyne.ops import _cli_common, logs

ApiOption = Annotated[str, typer.Option(help="Base URL of the controller's HTTP API.")]
TokenOption = Annotated[
    str | None, typer.Option(envvar="OSRDYNE_API__TOKEN", help="Bearer token of the API.")
]


def status(
    api: ApiOption = "http://127.0.0.1:8090",
    token: TokenOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status document.")] = False,
) -> None:
    """Show the pool: role, generations, each group's state, workers and queue."""
    with _cli_common.answering():
        doc = _get_status(api, token)
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
) -> None:
    """Show the pool like `status`, refreshed live until Ctrl-C."""
    import time

    from rich.live import Live
    from rich.text import Text

    from osrdyne.ops import _status_table

    def render() -> Any:
        try:
            return _status_table.render(_get_status(api, token))
        except _cli_common.Failure as failure:
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
