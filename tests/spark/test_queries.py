"""The query worker answers each query form, in-process on the shared session."""

from __future__ import annotations

import io
from collections.abc import Callable

import pyarrow as pa
import pytest

from spark_workers import SparkWorker, demo_queries
from tests.spark.conftest import TRIPS_ROWS, call

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def app(make_app: Callable[..., SparkWorker]) -> SparkWorker:
    return make_app("trips")


def test_load_caches_the_dataset_and_registers_the_view(app: SparkWorker) -> None:
    assert app.data is not None and app.load_error is None
    assert app.data.rows == TRIPS_ROWS
    assert app.data.df.is_cached
    assert app.data.spark.catalog.tableExists("dataset")
    schema = call(app, path="schema")
    names = [c["name"] for c in schema["columns"]]
    assert {"trip_id", "city", "fare", "payment"} <= set(names)
    assert schema["rows"] == TRIPS_ROWS


def test_structured_select_filter_order_limit(app: SparkWorker) -> None:
    answer = call(
        app,
        {
            "select": ["trip_id", "fare", "city"],
            "where": [
                {"column": "fare", "op": ">", "value": 50},
                {"column": "city", "op": "in", "value": ["Paris", "Lyon"]},
            ],
            "order_by": ["-fare", "trip_id"],
            "limit": 7,
        },
    )
    rows = answer["rows"]
    assert [c["name"] for c in answer["columns"]] == ["trip_id", "fare", "city"]
    assert 0 < len(rows) <= 7 and answer["row_count"] == len(rows)
    assert all(r["fare"] > 50 and r["city"] in ("Paris", "Lyon") for r in rows)
    assert [r["fare"] for r in rows] == sorted((r["fare"] for r in rows), reverse=True)
    assert answer["truncated"] is False


def test_structured_group_by_matches_sql(app: SparkWorker) -> None:
    grouped = call(
        app,
        {
            "group_by": ["payment"],
            "aggregates": [
                {"fn": "count", "as": "n"},
                {"fn": "max", "column": "tip"},
                {"fn": "count_distinct", "column": "city", "as": "cities"},
            ],
            "order_by": ["payment"],
        },
    )
    assert [c["name"] for c in grouped["columns"]] == ["payment", "n", "max_tip", "cities"]
    assert sum(r["n"] for r in grouped["rows"]) == TRIPS_ROWS
    sql = call(
        app,
        {"sql": "SELECT payment, count(*) AS n FROM dataset GROUP BY payment ORDER BY payment"},
    )
    assert [(r["payment"], r["n"]) for r in sql["rows"]] == [
        (r["payment"], r["n"]) for r in grouped["rows"]
    ]


def test_sql_with_cte_subquery_and_window(app: SparkWorker) -> None:
    answer = call(
        app,
        {
            "sql": "WITH t AS (SELECT city, fare FROM dataset WHERE passengers > 1) "
            "SELECT city, fare, rank() OVER (PARTITION BY city ORDER BY fare DESC) AS r "
            "FROM t WHERE fare > (SELECT avg(fare) FROM dataset) QUALIFY r <= 2 "
            "ORDER BY city, r",
        },
    )
    assert answer["rows"] and all(r["r"] <= 2 for r in answer["rows"])


def test_arrow_output_decodes_with_pyarrow(app: SparkWorker) -> None:
    data = call(
        app,
        {"sql": "SELECT trip_id, fare FROM dataset ORDER BY trip_id LIMIT 50", "format": "arrow"},
    )
    assert isinstance(data, bytes)
    table = pa.ipc.open_stream(io.BytesIO(data)).read_all()
    assert table.column_names == ["trip_id", "fare"]
    assert table.column("trip_id").to_pylist() == list(range(50))
    assert table.schema.metadata[b"osrdyne.truncated"] == b"false"


def test_count_endpoint_and_partition_filter_key(
    app: SparkWorker, make_app: Callable[..., SparkWorker]
) -> None:
    lyon = call(app, {"where": [{"column": "city", "op": "=", "value": "Lyon"}]}, path="count")
    assert 0 < lyon["count"] < TRIPS_ROWS
    keyed = make_app("trips/city=Lyon")
    assert keyed.data is not None and keyed.data.rows == lyon["count"]


def test_csv_and_json_datasets(make_app: Callable[..., SparkWorker]) -> None:
    for key in ("sales", "sales_json"):
        app = make_app(key)
        assert app.load_error is None, app.load_error
        answer = call(
            app,
            {
                "group_by": ["product"],
                "aggregates": [{"fn": "sum", "column": "quantity", "as": "q"}],
            },
        )
        assert len(answer["rows"]) == 5


def test_results_are_capped_in_rows_and_bytes(make_app: Callable[..., SparkWorker]) -> None:
    from worker_sdk import HandlerError

    app = make_app("trips", max_rows=10)
    answer = call(app, {"select": ["trip_id"]})
    assert answer["row_count"] == 10 and answer["truncated"] is True
    data = call(app, {"select": ["trip_id"], "format": "arrow"})
    import pyarrow.ipc

    table = pyarrow.ipc.open_stream(data).read_all()
    assert table.num_rows == 10 and table.schema.metadata[b"osrdyne.truncated"] == b"true"
    small = make_app("trips", max_result_bytes=2048)
    with pytest.raises(HandlerError, match="result too large"):
        call(small, {"sql": "SELECT * FROM dataset"})


def test_demo_queries_run(app: SparkWorker) -> None:
    for name, doc in demo_queries().items():
        answer = call(app, doc)
        assert answer, name


def test_repeated_queries_reuse_their_plan(app: SparkWorker) -> None:
    from spark_workers import query_worker

    assert app.data is not None
    cache = query_worker.plan_cache(app.data)
    doc = {
        "where": [{"column": "passengers", "op": ">=", "value": 3}],
        "aggregates": [{"fn": "count", "as": "n"}],
    }
    first = call(app, doc)
    hits = cache.hits
    assert call(app, doc) == first and cache.hits == hits + 1
    other = call(app, {**doc, "where": [{"column": "passengers", "op": ">=", "value": 4}]})
    assert other["rows"][0]["n"] < first["rows"][0]["n"] and cache.hits == hits + 1
    arrow = call(app, {**doc, "format": "arrow"})  # same plan, other encoding
    assert isinstance(arrow, bytes) and cache.hits == hits + 2


def test_embedded_spark_caches_before_ready(make_app: Callable[..., SparkWorker]) -> None:
    """`cache_in_background` is for Spark Connect: embedded Spark would make the queries
    answered meanwhile wait for the cache being built (it substitutes it into their plans)."""
    app = make_app("trips", cache_in_background=True)
    assert app.cached.is_set() and app.data is not None
    assert app.data.df.is_cached and app.data.rows == TRIPS_ROWS


def test_warm_up_leaves_nothing_behind(app: SparkWorker) -> None:
    """A standby worker's warm-up (`session.warm_up`) caches nothing for good and leaves no
    view: the key it gets later finds the session as it was."""
    from spark_workers import session

    assert app.data is not None
    spark = app.data.spark
    views = {t.name for t in spark.catalog.listTables()}
    persisted = spark.sparkContext._jsc.getPersistentRDDs().size()
    session.warm_up(spark)
    assert {t.name for t in spark.catalog.listTables()} == views
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == persisted
