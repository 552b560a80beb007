"""A worker cannot be wedged: queries that would exhaust the JVM from a constant are refused,
oversize documents never reach Spark, work past its bound is answered at the bound, and a
lost JVM is answered and ends the worker (in-process here; `test_worker_process` kills real
JVMs)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_workers import DeadlineExceeded, SparkWorker, cancellation, query_worker, sql_guard
from spark_workers.ending import EXIT_JVM_LOST
from tests.spark.conftest import TRIPS_ROWS, call, make_request, settings_for
from worker_sdk import HandlerError, Requeue

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def app(spark: Any, datasets: Path) -> Iterator[SparkWorker]:
    worker = query_worker.create_app(settings_for(datasets))
    worker.start("trips", spark=spark)
    worker.cached.wait(300)
    yield worker


#: Queries that would generate more data than any answer needs from a constant, or from a
#: column times a constant (tests/spark_connect/sql_corpus.py runs them past both guards).
GENERATED_FROM_CONSTANTS = [
    "SELECT explode(sequence(1, 100000000))",
    "SELECT repeat('x', 1500000000)",
    "SELECT length(repeat('x', 1500000000)) AS n",
    "SELECT IDENTIFIER('repeat')('x', 1500000000)",
    "SELECT * FROM VALUES (length(space(1500000000))) AS v(n)",
    "SELECT 1 LIMIT length(lpad('', 1500000000, 'x'))",
    "SELECT rpad('x', 1500000000)",
    "SELECT size(array_repeat(0, 1500000000))",
    "SELECT size(array_insert(array(1), 1500000000, 2))",
    "SELECT stack(1500000000, 1)",
    "SELECT format_number(1.5D, 1500000000)",
    "SELECT randstr(1500000000)",
    "SELECT repeat(repeat('x', 5000), 5000)",
    "SELECT transform(sequence(1, 5000), x -> sequence(1, 5000))",
    "WITH a AS (SELECT repeat('x', 5000) AS s) SELECT length(repeat(s, 5000)) FROM a",
    "SELECT sequence(1, passengers * 100000000) FROM dataset",
    "SELECT repeat('x', CAST(fare AS INT) * 100000000) FROM dataset",
    "SELECT sequence(DATE '0001-01-01', DATE '9999-12-31')",
    "SELECT histogram_numeric(fare, 1500000000) FROM dataset",
    "SELECT approx_count_distinct(trip_id, 0.00001) FROM dataset",
]


@pytest.mark.parametrize("sql", GENERATED_FROM_CONSTANTS)
def test_data_generated_from_a_constant_is_bounded(app: SparkWorker, sql: str) -> None:
    with pytest.raises(HandlerError) as info:
        call(app, {"sql": sql})
    assert info.value.details["reason"] == "refused"
    # The worker is not wedged: the next query is answered.
    assert call(app, {"sql": "SELECT count(*) AS n FROM dataset"})["rows"] == [{"n": TRIPS_ROWS}]


def cte_chain(levels: int) -> str:
    """Each CTE reads the previous one twice: 1.7 kB of SQL for 30 levels, whose expansion
    took the analyzer out of a 1 GB heap at 14 levels."""
    ctes = ["c0 AS (SELECT trip_id, fare FROM dataset)"] + [
        f"c{i} AS (SELECT * FROM c{i - 1} UNION ALL SELECT * FROM c{i - 1})"
        for i in range(1, levels + 1)
    ]
    return f"WITH {', '.join(ctes)} SELECT count(*) AS n FROM c{levels}"


#: Queries whose plans explode while Spark plans them, and the refusal each gets
#: (tests/spark_connect/sql_corpus.py runs them past both guards).
EXPLODING_PLANS = [
    (cte_chain(30), "once its CTEs are expanded"),
    (cte_chain(10), "once its CTEs are expanded"),
    ("SELECT 1 FROM dataset GROUP BY CUBE(" + ", ".join(["city"] * 24) + ")", "grouping sets"),
    (
        "SELECT 1 FROM dataset GROUP BY CUBE(city, fare), CUBE(" + ", ".join(["tip"] * 11) + ")",
        "grouping sets",
    ),
]


@pytest.mark.parametrize(("sql", "message"), EXPLODING_PLANS)
def test_plans_that_explode_while_planning_are_refused(
    app: SparkWorker, sql: str, message: str
) -> None:
    with pytest.raises(HandlerError, match=message):
        call(app, {"sql": sql})
    assert call(app, {"sql": "SELECT count(*) AS n FROM dataset"})["rows"] == [{"n": TRIPS_ROWS}]


def test_generating_functions_within_their_bound_answer(app: SparkWorker) -> None:
    answer = call(
        app,
        {
            "sql": "SELECT x, lpad(cast(x AS string), 4, '0') AS padded, repeat('*', 3) AS bar "
            "FROM (SELECT explode(sequence(1, 100)) AS x) ORDER BY x"
        },
    )
    assert answer["row_count"] == 100 and answer["rows"][6]["padded"] == "0007"


@pytest.fixture
def spark_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a document gets as far as the guard (Spark's parser)."""

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the document reached Spark")

    monkeypatch.setattr(sql_guard, "checked_sql", reached)


@pytest.mark.parametrize(
    ("document", "limit"),
    [
        (
            {"where": [{"column": "trip_id", "op": "in", "value": list(range(100_000))}]},
            "max_in_values",
        ),
        (
            {"where": [{"column": "trip_id", "op": "not in", "value": list(range(1_001))}]},
            "max_in_values",
        ),
        ({"where": [{"column": "fare", "op": ">", "value": 1}] * 101}, "max_conditions"),
        ({"select": ["fare"] * 101}, "max_columns"),
        ({"group_by": ["city"], "order_by": ["city"] * 101}, "max_columns"),
        (
            {
                "sql": "SELECT * FROM dataset WHERE trip_id IN ("
                + ",".join(map(str, range(5_000)))
                + ")"
            },
            "max_sql_chars",
        ),
        ({"sql": "SELECT 1 -- " + "x" * 30_000}, "max_sql_chars"),
        (
            {"select": ["fare"], "where": [{"column": "city", "value": "x" * 1_100_000}]},
            "max_request_bytes",
        ),
    ],
)
@pytest.mark.usefixtures("spark_unreachable")
def test_oversize_documents_are_refused_before_spark_sees_them(
    app: SparkWorker, document: dict[str, Any], limit: str
) -> None:
    with pytest.raises(HandlerError) as info:
        call(app, document)
    assert info.value.details["reason"] == "limit"
    assert info.value.details["limit"] == limit
    assert f"SPARK_WORKER_{limit.upper()}" in info.value.message


def test_work_that_cannot_be_cancelled_is_answered_at_the_bound(spark: Any) -> None:
    """Planning ignores job-group cancellation; so does this stand-in, a wait nothing
    interrupts. The caller is answered at the bound; the overrun is reported once the grace
    passed (the worker then ends its process: `test_worker_process` plans for real)."""
    overruns: list[str] = []
    reported = threading.Event()

    def on_overrun(description: str, seconds: float) -> None:
        overruns.append(description)
        reported.set()

    runner = cancellation.Runner(spark, grace=0.5, on_overrun=on_overrun)
    release = threading.Event()
    try:
        with pytest.raises(DeadlineExceeded) as info:
            runner.run(lambda: release.wait(120), timeout=0.5, description="stuck planning")
        assert info.value.details["reason"] == "timeout"
        assert not release.is_set()  # answered while the work still runs
        assert reported.wait(60) and overruns == ["stuck planning"]
    finally:
        release.set()
        runner.close()


def test_a_lost_jvm_is_answered_then_the_worker_ends(
    spark: Any, datasets: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What py4j raises once the JVM is gone (`ConnectionRefusedError` for every call) is
    answered with `jvm_lost` and ends the worker; later requests go back to the queue."""
    worker = query_worker.create_app(settings_for(datasets))
    worker.start("trips", spark=spark)
    worker.cached.wait(300)
    worker.ending.watch = None  # no process exit to wait for: the shared JVM lives on

    def handler(request: Any, data: Any) -> Any:
        try:
            data.spark.sql("SELECT 1").collect()
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as exc:
            raise HandlerError("query failed: Connection refused") from exc

    with pytest.raises(HandlerError) as info:
        worker.call(handler, make_request(b""))
    assert info.value.details["reason"] == "jvm_lost"
    assert worker.exit_code == EXIT_JVM_LOST
    assert any("ending the worker (exit code 70)" in r.getMessage() for r in caplog.records)
    with pytest.raises(Requeue):
        worker.call(query_worker.answer_query, make_request(json.dumps({}).encode()))
