"""The pool as a table for a terminal (`osrdyne status`, `osrdyne watch`).

It fits the terminal, 80 columns included: every column but the key's is short and never
wrapped, the key wraps onto as many lines as it needs (a key is never cut: two keys differing
only at their end must stay apart), and each group's last error goes on a line of its own
under the table. The age of the oldest waiting request only shows when the broker reports it
(classic queues; RabbitMQ 3.10 does not for quorum queues); `--json` has every field.
"""

from __future__ import annotations

import signal
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from osrdyne.controller import GroupReport, StatusDocument


def _figure(value: int | None) -> str:
    return "-" if value is None else str(value)


def _ago(seconds: float | None, now: float) -> str:
    return "-" if seconds is None else f"{max(0.0, now - seconds):.0f}s"


def _exit(code: int | None) -> str:
    """An exit code as operators read it: `-9` is `SIGKILL`."""
    if code is None:
        return "-"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return str(code)
    return str(code)


def _last_exit(group: GroupReport) -> str:
    exits = [w.last_exit for w in group.workers or () if w.last_exit is not None]
    return _exit(exits[-1]) if exits else "-"


def _workers(group: GroupReport) -> str:
    if group.workers is None:
        return "yes" if group.running else "no"
    return str(len(group.workers))


def title(doc: StatusDocument) -> str:
    gens = doc.generations
    text = f"pool {doc.pool}: {doc.role.value}"
    if gens is not None:
        text += f", generations: tracker {gens.tracker}, queues {gens.queues}, groups {gens.groups}"
    return text


def render(doc: StatusDocument) -> Any:
    """The status document as a renderable: the table, then one line per error."""
    oldest = any(g.oldest_message_age is not None for g in doc.groups.values())
    table = Table(
        title=title(doc),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=0,
        show_edge=False,
    )
    table.add_column("key", overflow="fold", min_width=10)
    for header in ("state", "workers", "restarts", "exit", "ready", "unacked", "consumers"):
        table.add_column(header, no_wrap=True, justify="left" if header == "state" else "right")
    if oldest:
        table.add_column("oldest", no_wrap=True, justify="right")
    table.add_column("activity", no_wrap=True, justify="right")
    notes: list[Text] = []
    for key, group in doc.groups.items():
        row = [
            Text(key),
            group.state.value,
            _workers(group),
            _figure(group.restarts),
            _last_exit(group),
            _figure(group.messages_ready),
            _figure(group.messages_unacknowledged),
            _figure(group.consumers),
        ]
        if oldest:
            age = group.oldest_message_age
            row.append("-" if age is None else f"{age:.0f}s")
        row.append(_ago(group.last_activity, doc.time))
        table.add_row(*row)
        if group.error:
            notes.append(Text.assemble((key, "bold"), ": ", group.error, overflow="fold"))
    parts: list[Any] = [table, *notes]
    if doc.queues_error:
        parts.append(Text(f"queue figures unavailable: {doc.queues_error}", overflow="fold"))
    if doc.last_error:
        parts.append(Text(f"last error: {doc.last_error}", overflow="fold"))
    return Group(*parts)
