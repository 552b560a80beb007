"""`osrdyne status` shows the caps on new keys and the broker's limits under the table, from
the same typed document `/status` serves (no broker: a document made by hand)."""

from __future__ import annotations

import io

from rich.console import Console

from osrdyne.controller import (
    AdmissionReport,
    BrokerReport,
    GroupReport,
    GroupState,
    Role,
    ScalingReport,
    StatusDocument,
)
from osrdyne.ops import _status_table


def rendered(doc: StatusDocument) -> str:
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(_status_table.render(doc))
    return console.export_text()


def test_admission_and_broker_lines() -> None:
    doc = StatusDocument(
        pool="p", instance="h:1:a", role=Role.LEADER, sessions=1, driver="noop", time=0.0
    )
    assert "admission" not in rendered(doc)  # not a leader's document: no lines
    doc.admission = AdmissionReport(
        groups=2, max_groups=2, broker_room=400, refusing="max_groups", refused={"max_groups": 3}
    )
    doc.broker = BrokerReport(
        node="rabbit@a", fd_used=102, fd_total=1024, proc_used=500, proc_total=1048576,
        mem_used=10, mem_limit=100, mem_alarm=True, queues=7, read_at=1.0,
    )  # fmt: skip
    text = rendered(doc)
    assert "admission: refusing new keys: max_groups; groups 2, max_groups 2" in text
    assert "room for 400 new queue(s) on the broker; refused: max_groups 3" in text
    assert "fd 102/1024 (10%)" in text and "alarms memory" in text and "queues 7" in text
    doc.broker = BrokerReport(error="HTTPStatusError: 401")
    assert "fd ?, processes ?" in rendered(doc) and "last reading failed: HTTPStatusError" in (
        rendered(doc)
    )


def test_a_scaled_group_shows_its_desired_workers() -> None:
    doc = StatusDocument(
        pool="p", instance="h:1:a", role=Role.LEADER, sessions=1, driver="subprocess", time=0.0
    )
    doc.groups["hot"] = GroupReport(
        state=GroupState.ACTIVE,
        running=True,
        scaling=ScalingReport(desired=8, current=3, reason="backlog", saturated=True),
    )
    doc.page = ["hot"]
    assert "yes>8!" in rendered(doc)
