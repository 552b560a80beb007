"""`osrdyne status` shows a failing group: its state, and why, under the table (from the typed
document `/status` serves; no broker: a document made by hand)."""

from __future__ import annotations

import io

from rich.console import Console

from osrdyne.controller import GroupReport, GroupState, Health, Role, StatusDocument
from osrdyne.ops import _status_table


def test_a_failing_group_shows_its_state_and_reason() -> None:
    doc = StatusDocument(
        pool="p", instance="h:1:a", role=Role.LEADER, sessions=1, driver="subprocess", time=100.0
    )
    doc.groups["broken"] = GroupReport(
        state=GroupState.ACTIVE,
        health=Health.FAILING,
        failing_reason="FileNotFoundError: /data/broken",
        failing_since=40.0,
        failed_starts=4,
    )
    doc.groups["fine"] = GroupReport(state=GroupState.ACTIVE, health=Health.OK)
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(_status_table.render(doc))
    text = console.export_text()
    assert "active failing" in text
    assert (
        "broken: failing for 60s (4 failed starts), answered start_failed: "
        "FileNotFoundError: /data/broken"
    ) in text
    assert "fine:" not in text
