"""Bad queries are answered with clear errors, and nothing outside the dataset is reached."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spark_workers import QueryRefused, SparkWorker
from tests.spark.conftest import call
from worker_sdk import HandlerError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def app(make_app: Callable[..., SparkWorker]) -> SparkWorker:
    return make_app("trips")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "invalid query document"),
        (b'{"selec": ["fare"]}', "invalid query document at selec"),
        (b'{"where": [{"column": "fare", "op": "~", "value": 1}]}', "invalid query document"),
        (b'{"sql": "SELECT 1", "select": ["fare"]}', "either 'sql' or structured"),
        (b'{"select": ["nope"]}', "unknown column 'nope'"),
        (b'{"group_by": ["city"], "order_by": ["fare"]}', "unknown column 'fare'"),
        (b'{"sql": "SELEC fare FROM dataset"}', "invalid SQL"),
        (b'{"sql": "SELECT nope FROM dataset"}', "invalid query"),
        (b'{"sql": ""}', "empty SQL query"),
    ],
)
def test_malformed_queries_get_clear_errors(app: SparkWorker, body: bytes, message: str) -> None:
    with pytest.raises(HandlerError, match=message):
        call(app, body)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE TABLE evil (a INT)", "only SELECT queries are allowed"),
        ("CREATE TEMPORARY VIEW evil AS SELECT 1", "only SELECT queries are allowed"),
        ("DROP VIEW dataset", "only SELECT queries are allowed"),
        ("INSERT INTO dataset SELECT * FROM dataset", "only SELECT queries are allowed"),
        ("SET spark.sql.runSQLOnFiles=true", "only SELECT queries are allowed"),
        ("CACHE TABLE dataset", "only SELECT queries are allowed"),
        ("SHOW TABLES", "only SELECT queries are allowed"),
        ("EXPLAIN SELECT * FROM dataset", "only SELECT queries are allowed"),
        ("SELECT * FROM dataset; DROP VIEW dataset", "invalid SQL"),
        ("SELECT * FROM parquet.`/etc`", "only the view 'dataset'"),
        ("SELECT * FROM csv.`/etc/passwd`", "only the view 'dataset'"),
        ("SELECT * FROM spark_catalog.default.other", "only the view 'dataset'"),
        ("SELECT * FROM read_files('/etc/passwd')", "table-valued functions are not allowed"),
        ("SELECT * FROM range(10)", "table-valued functions are not allowed"),
        ("SELECT reflect('java.lang.System', 'exit', 0)", "function 'reflect' is not allowed"),
        ("SELECT system.builtin.java_method('java.lang.Runtime', 'getRuntime')", "java_method"),
        ("SELECT input_file_name() FROM dataset", "input_file_name"),
    ],
)
def test_sql_that_is_not_a_read_of_the_dataset_is_refused(
    app: SparkWorker, sql: str, message: str
) -> None:
    with pytest.raises(HandlerError, match=message):
        call(app, {"sql": sql})
    assert app.data is not None
    spark = app.data.spark
    assert [t.name for t in spark.catalog.listTables()] == ["dataset"] or all(
        t.name != "evil" for t in spark.catalog.listTables()
    )
    assert spark.conf.get("spark.sql.runSQLOnFiles") == "false"


def test_another_view_in_the_session_is_refused_by_the_analyzed_plan(app: SparkWorker) -> None:
    """A single-name relation passes the parser check; the analyzer sees which view it is."""
    assert app.data is not None
    app.data.spark.range(3).createOrReplaceTempView("secret")
    try:
        for sql in (
            "SELECT * FROM secret",
            "SELECT * FROM dataset WHERE trip_id IN (SELECT id FROM secret)",
            "WITH x AS (SELECT * FROM secret) SELECT * FROM x",
            "SELECT * FROM IDENTIFIER('secret')",
        ):
            with pytest.raises(QueryRefused, match="only the view 'dataset'"):
                call(app, {"sql": sql})
    finally:
        app.data.spark.catalog.dropTempView("secret")


def test_file_reads_are_refused_even_by_spark(app: SparkWorker) -> None:
    """The third fence: with runSQLOnFiles off, Spark itself will not read a path."""
    assert app.data is not None
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException):
        app.data.spark.sql("SELECT * FROM text.`/etc/hostname`").collect()


def test_unknown_dataset_is_answered_not_crashed(make_app: Callable[..., SparkWorker]) -> None:
    app = make_app("no_such_dataset")
    assert app.data is None and "unknown dataset 'no_such_dataset'" in (app.load_error or "")
    for path in (None, "schema", "count"):
        with pytest.raises(HandlerError, match="unknown dataset"):
            call(app, {}, path=path)
