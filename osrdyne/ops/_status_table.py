"""The pool as a table for a terminal (`osrdyne status`, `osrdyne watch`).

It fits the terminal, 80 columns included: every column but the key's is short and never
wrapped, the key wraps onto as many lines as it needs (a key is never cut: two keys differing
only at their end must stay apart), and each group's last error goes on a line of its own
under the table, as does the reason of a failing group (its state reads `active failing`:
its workers keep failing to start). The age of the oldest waiting request only shows when
the broker reports it (classic queues; RabbitMQ 3.10 does not for quorum queues); `--json`
has every field.
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
    """The workers, `3>8` while the group scaler grows it to 8, `!` when it is saturated."""
    text = ("yes" if group.running else "no") if group.workers is None else str(len(group.workers))
    scaling = group.scaling
    if scaling is not None:
        if scaling.desired != scaling.current:
            text += f">{scaling.desired}"
        if scaling.saturated:
            text += "!"
    return text


def title(doc: StatusDocument) -> str:
    gens = doc.generations
    text = f"pool {doc.pool}: {doc.role.value}"
    if gens is not None:
        text += f", generations: tracker {gens.tracker}, queues {gens.queues}, groups {gens.groups}"
    return text


def _of(used: int | None, total: int | None) -> str:
    if used is None or total is None:
        return "?"
    return f"{used}/{total} ({100 * used / total:.0f}%)" if total else f"{used}/{total}"


def limits(doc: StatusDocument) -> list[Text]:
    """Lines for the caps on new keys and the broker's limits (leader only)."""
    lines: list[Text] = []
    admission = doc.admission
    if admission is not None:
        caps = [f"groups {admission.groups}"]
        if admission.max_groups is not None:
            caps.append(f"max_groups {admission.max_groups}")
        if admission.driver_capacity is not None:
            caps.append(f"driver capacity {admission.driver_capacity}")
        if admission.standby is not None:
            caps.append(f"standby workers {admission.standby}")
        if admission.broker_room is not None:
            caps.append(f"room for {admission.broker_room} new queue(s) on the broker")
        state = f"refusing new keys: {admission.refusing}" if admission.refusing else "admitting"
        refused = ", ".join(f"{r} {n}" for r, n in sorted(admission.refused.items()))
        text = f"admission: {state}; " + ", ".join(caps)
        lines.append(Text(text + (f"; refused: {refused}" if refused else ""), overflow="fold"))
    broker = doc.broker
    if broker is not None:
        alarms = [a for a, on in (("memory", broker.mem_alarm), ("disk", broker.disk_alarm)) if on]
        text = (
            f"broker {broker.node or '?'}: fd {_of(broker.fd_used, broker.fd_total)}, "
            f"processes {_of(broker.proc_used, broker.proc_total)}, "
            f"memory {_of(broker.mem_used, broker.mem_limit)}, "
            f"queues {_figure(broker.queues)}, alarms {', '.join(alarms) or 'none'}"
        )
        if broker.error:
            text += f"; last reading failed: {broker.error}"
        lines.append(Text(text, overflow="fold"))
    for node in doc.broker_nodes:
        trouble = [
            "down" if not node.running else "",
            f"partitioned from {', '.join(node.partitions)}" if node.partitions else "",
            "memory alarm" if node.mem_alarm else "",
            "disk alarm" if node.disk_alarm else "",
        ]
        health = ", ".join(t for t in trouble if t) or "running"
        connections = "?" if node.pool_connections is None else str(node.pool_connections)
        text = (
            f"node {node.name}: {health}; pool connections {connections}, "
            f"queue leaders {node.queue_leaders}, members missing {node.members_missing}"
        )
        lines.append(Text(text, overflow="fold"))
    return lines


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
        failing = group.failing_reason is not None
        row: list[Text | str] = [
            Text(key),
            f"{group.state.value} failing" if failing else group.state.value,
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
        if group.failing_reason is not None:
            since = _ago(group.failing_since, doc.time)
            notes.append(
                Text.assemble(
                    (key, "bold"),
                    f": failing for {since} ({group.failed_starts} failed starts), answered "
                    "start_failed: ",
                    group.failing_reason,
                    overflow="fold",
                )
            )
        if group.error:
            notes.append(Text.assemble((key, "bold"), ": ", group.error, overflow="fold"))
    parts: list[Any] = [table, *notes, *limits(doc)]
    if doc.groups_matching > len(doc.groups):
        shown = f"{len(doc.groups)} of {doc.groups_matching} groups shown"
        counts = ", ".join(f"{n} {state}" for state, n in doc.group_counts.items())
        parts.insert(1, Text(f"{shown} ({counts})", overflow="fold"))
    if doc.groups_failing and doc.groups_matching > len(doc.groups):
        parts.append(Text(f"{doc.groups_failing} group(s) failing", overflow="fold"))
    if doc.queues_error:
        parts.append(Text(f"queue figures unavailable: {doc.queues_error}", overflow="fold"))
    if doc.last_error:
        parts.append(Text(f"last error: {doc.last_error}", overflow="fold"))
    return Group(*parts)
