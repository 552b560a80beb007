"""A query outliving its caller's deadline is cancelled, answered with an error, and the
session keeps serving."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from spark_workers import DeadlineExceeded, SparkWorker
from tests.spark.conftest import call

pytestmark = pytest.mark.timeout(120)

#: 2000^3 rows to count: minutes of work on two cores.
SLOW_SQL = "SELECT count(*) AS n FROM dataset a CROSS JOIN dataset b CROSS JOIN dataset c"


def test_slow_query_is_cancelled_at_the_deadline(make_app: Callable[..., SparkWorker]) -> None:
    app = make_app("trips")
    assert app.data is not None
    sc = app.data.spark.sparkContext
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="query cancelled") as info:
        call(app, {"sql": SLOW_SQL}, timeout=2.0)
    assert info.value.details["reason"] == "timeout"
    assert time.monotonic() - started < 60  # cancelled, not run to completion
    deadline = time.monotonic() + 30
    while sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sc.statusTracker().getActiveJobsIds() == []
    # The session is still usable, and the next request is not in the cancelled group.
    answer = call(app, {"sql": "SELECT count(*) AS n FROM dataset"}, timeout=60)
    assert answer["rows"] == [{"n": app.data.rows}]


def test_query_timeout_setting_applies_without_a_deadline(
    make_app: Callable[..., SparkWorker],
) -> None:
    app = make_app("trips", query_timeout=1.5)
    with pytest.raises(DeadlineExceeded):
        call(app, {"sql": SLOW_SQL})


def test_a_request_already_past_its_deadline_starts_no_job(
    make_app: Callable[..., SparkWorker],
) -> None:
    app = make_app("trips")
    with pytest.raises(DeadlineExceeded):
        call(app, {"sql": "SELECT 1"}, timeout=-1)
