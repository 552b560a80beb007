"""The reliability table: what each fault test sent and what came back, by correlation id.

Each fault test keeps a `Tally`: the correlation ids it sent, and every final reply it got
(with its `x-status`). Its row counts requests sent, answered `ok`, answered with an error (by
status), lost (no final answer within the test's bounded wait) and duplicated (more than one
final answer for one id). Rows are printed and appended, one JSON object a line, to
`$OSRDYNE_RELIABILITY_REPORT` (else `reliability.jsonl` in pytest's base temp dir).

    python -m tests.faults.report [ROWS.jsonl]     # the markdown table of docs/reliability.md
"""

from __future__ import annotations

import collections
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

ENV = "OSRDYNE_RELIABILITY_REPORT"


@dataclasses.dataclass
class Tally:
    scenario: str
    sent: list[str] = dataclasses.field(default_factory=list)
    replies: dict[str, list[str]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    #: Extra columns of this scenario (e.g. replies lost by design), name -> count.
    extra: dict[str, int] = dataclasses.field(default_factory=dict)
    note: str = ""
    #: Unanswered ids whose loss the protocol allows, counted apart: id -> column name.
    excused: dict[str, str] = dataclasses.field(default_factory=dict)

    def excuse(self, correlation_ids: list[str], column: str) -> None:
        """Count these ids, if unanswered, under `column` instead of `lost`."""
        for cid in correlation_ids:
            self.excused[cid] = column

    def sent_one(self, correlation_id: str) -> None:
        self.sent.append(correlation_id)

    def replied(self, correlation_id: str, status: str) -> None:
        self.replies[correlation_id].append(status)

    def answered(self, correlation_id: str) -> bool:
        return bool(self.replies.get(correlation_id))

    def pending(self) -> list[str]:
        return [c for c in self.sent if not self.replies.get(c)]

    def status_of(self, correlation_id: str) -> str | None:
        statuses = self.replies.get(correlation_id)
        return statuses[0] if statuses else None

    def row(self) -> dict[str, Any]:
        sent = set(self.sent)
        firsts = collections.Counter(self.replies[c][0] for c in self.sent if self.replies.get(c))
        extra = dict(self.extra)
        lost = 0
        for cid in self.pending():
            if cid in self.excused:
                extra[self.excused[cid]] = extra.get(self.excused[cid], 0) + 1
            else:
                lost += 1
        return {
            "scenario": self.scenario,
            "sent": len(self.sent),
            "ok": firsts.pop("ok", 0),
            "errors": dict(sorted(firsts.items())),
            "lost": lost,
            "duplicated": sum(1 for c in sent if len(self.replies.get(c, [])) > 1),
            "unexpected": sum(1 for c in self.replies if c not in sent),
            "extra": extra,
            "note": self.note,
        }


def write_row(path: Path, row: dict[str, Any]) -> None:
    print(f"\nreliability: {json.dumps(row, ensure_ascii=False)}")
    with path.open("a") as out:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table: one line per scenario (the last row of a scenario wins)."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        latest[row["scenario"]] = row
    lines = [
        "| scenario | sent | ok | error (by status) | lost | duplicated | other | notes |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- | --- |",
    ]
    for row in latest.values():
        errors = ", ".join(f"{k} {v}" for k, v in row["errors"].items()) or "-"
        extra = ", ".join(f"{k} {v}" for k, v in row.get("extra", {}).items()) or "-"
        lines.append(
            f"| {row['scenario']} | {row['sent']} | {row['ok']} | {errors} | {row['lost']} "
            f"| {row['duplicated']} | {extra} | {row.get('note', '')} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import os

    path = Path(argv[0] if argv else os.environ.get(ENV, "reliability.jsonl"))
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
