"""The Grafana dashboard only queries metrics that exist, and shows every one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from osrdyne.ops.metrics import ControllerMetrics
from worker_sdk.metrics import WorkerMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "osrdyne-dashboard.json"


def registered() -> set[str]:
    names: set[str] = set()
    for registry in (ControllerMetrics().registry, WorkerMetrics().registry):
        for family in registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_the_dashboard_queries_existing_metrics_and_all_of_them() -> None:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in doc["panels"] for t in panel["targets"]]
    used = {
        re.sub(r"_(bucket|count|sum)$", "", name)
        for expr in exprs
        for name in re.findall(r"\bosrdyne_[a-z_]+", expr)
    }
    known = registered()
    assert used <= known, f"unknown metrics: {used - known}"
    # The exchange mirror is a raw broker figure: the routed counter shows it better.
    assert known - used == {"osrdyne_request_exchange_published"}
    ids = [panel["id"] for panel in doc["panels"]]
    assert len(ids) == len(set(ids))
