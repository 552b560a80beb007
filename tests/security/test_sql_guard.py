"""Hostile SQL is refused before anything runs, however it is spelled.

Each attack, had it run, leaves a trace: the view `dataset` replaced or dropped, a directory
written, a session variable, a JVM system property set through reflection. After each refusal
the test checks that none is there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_workers import QueryRefused, SparkWorker, plan_tree, query_worker, sql_guard
from tests.spark.conftest import TRIPS_ROWS, call, make_request, settings_for
from worker_sdk import HandlerError

pytestmark = pytest.mark.timeout(180)

#: A reflective call with a visible effect: it sets this JVM system property.
PWNED = "osrdyne.pwned"
SET_PROPERTY = f"'java.lang.System', 'setProperty', '{PWNED}', 'yes'"


@pytest.fixture(scope="module")
def app(spark: Any, datasets: Path) -> Iterator[SparkWorker]:
    worker = query_worker.create_app(settings_for(datasets))
    worker.start("trips", spark=spark)
    worker.cached.wait(300)
    yield worker


def assert_nothing_ran(app: SparkWorker, target: Path) -> None:
    """The view still serves the trips, nothing was written, no variable, no property."""
    assert app.data is not None
    spark = app.data.spark
    answer = call(app, {"sql": "SELECT count(*) AS n, max(fare) AS m FROM dataset"})
    assert answer["rows"][0]["n"] == TRIPS_ROWS and answer["rows"][0]["m"] > 0
    assert not target.exists()
    variables = spark._jsparkSession.sessionState().catalogManager().tempVariableManager()
    assert variables.isEmpty()
    assert spark._jvm.java.lang.System.getProperty(PWNED) is None


COMMANDS = [
    "EXECUTE IMMEDIATE 'CREATE OR REPLACE TEMPORARY VIEW dataset AS SELECT * FROM "
    "csv.`/etc/passwd`'",
    "EXECUTE IMMEDIATE 'CREATE OR REPLACE TEMPORARY VIEW dataset AS SELECT 1 AS fare'",
    "execute immediate 'DROP VIEW dataset'",
    "EXECUTE IMMEDIATE 'DROP ' || 'VIEW dataset'",
    "/* just a query */ EXECUTE IMMEDIATE 'INSERT OVERWRITE DIRECTORY ''{target}'' SELECT 1'",
    "EXECUTE IMMEDIATE 'INSERT OVERWRITE DIRECTORY ''{target}'' USING parquet SELECT 1 AS x'",
    "INSERT OVERWRITE DIRECTORY '{target}' USING csv SELECT * FROM dataset",
    "EXECUTE IMMEDIATE 'SELECT java_method(" + SET_PROPERTY.replace("'", "''") + ")'",
    "INSERT OVERWRITE DIRECTORY '{target}' SELECT 1",
    "FROM dataset INSERT OVERWRITE DIRECTORY '{target}' SELECT *",
    "WITH t AS (SELECT * FROM dataset) INSERT OVERWRITE DIRECTORY '{target}' SELECT * FROM t",
    "DECLARE OR REPLACE VARIABLE stmt STRING DEFAULT 'DROP VIEW dataset'",
    "EXECUTE IMMEDIATE stmt",
    "SET VAR stmt = 'DROP VIEW dataset'",
    "BEGIN DECLARE stmt STRING DEFAULT 'DROP VIEW dataset'; EXECUTE IMMEDIATE stmt; END",
    "CREATE OR REPLACE TEMPORARY VIEW dataset AS SELECT 1 AS fare",
    "SELECT TRANSFORM(*) USING 'touch {target}' FROM dataset",
    "CALL system.some_procedure()",
]


@pytest.mark.parametrize("sql", COMMANDS)
def test_commands_are_refused_before_anything_runs(
    app: SparkWorker, sql: str, tmp_path: Path
) -> None:
    target = tmp_path / "exfiltrated"
    with pytest.raises(QueryRefused, match="only SELECT queries are allowed"):
        call(app, {"sql": sql.format(target=target)})
    assert_nothing_ran(app, target)


REFLECTION = [
    f"SELECT IDENTIFIER('reflect')({SET_PROPERTY})",
    f"SELECT IDENTIFIER('java_method')({SET_PROPERTY})",
    f"SELECT IDENTIFIER('system.builtin.java_method')({SET_PROPERTY})",
    f"SELECT IDENTIFIER('`try_reflect`')({SET_PROPERTY})",
    f"SELECT system.builtin.reflect({SET_PROPERTY})",
    f"SELECT builtin.`java_method`({SET_PROPERTY})",
    f"SELECT `reflect`({SET_PROPERTY})",
    f"SELECT ReFlEcT({SET_PROPERTY})",
    f"SELECT try_reflect({SET_PROPERTY})",
    f"SELECT transform(array(1), x -> reflect({SET_PROPERTY}))",
    f"SELECT aggregate(array(1), '', (acc, x) -> java_method({SET_PROPERTY}))",
    f"SELECT * FROM dataset WHERE city = (SELECT reflect({SET_PROPERTY}))",
    f"SELECT * FROM dataset WHERE EXISTS (SELECT 1 WHERE reflect({SET_PROPERTY}) IS NULL)",
    f"WITH t AS (SELECT reflect({SET_PROPERTY}) AS r) SELECT r FROM t",
    f"WITH a AS (SELECT 1 AS x), b AS (SELECT java_method({SET_PROPERTY}) FROM a) SELECT * FROM b",
    f"SELECT * FROM VALUES (reflect({SET_PROPERTY})) AS v(r)",
    f"SELECT r FROM dataset LATERAL VIEW explode(array(reflect({SET_PROPERTY}))) t AS r",
    "SELECT IDENTIFIER('reflect')('java.lang.System', 'getenv', 'WORKER_AMQP_URI')",
    "SELECT IDENTIFIER('re' || 'flect')('java.lang.System', 'getenv', 'WORKER_AMQP_URI')",
]


@pytest.mark.parametrize("sql", REFLECTION)
def test_reflection_is_refused_however_spelled(app: SparkWorker, sql: str, tmp_path: Path) -> None:
    with pytest.raises(QueryRefused) as info:
        call(app, {"sql": sql})
    assert "not allowed" in info.value.message or "IDENTIFIER" in info.value.message
    assert_nothing_ran(app, tmp_path / "unused")


#: Queries after what the worker is and holds: its user, files, environment, settings
#: (tests/spark_connect/sql_corpus.py runs them past both guards).
LEAKS = [
    "SELECT current_user",  # a bare name Spark resolves to a function
    "SELECT IDENTIFIER('session_user')",
    "SELECT user()",
    "SELECT version()",
    "SELECT input_file_name() FROM dataset",
    "SELECT '${env:WORKER_AMQP_URI}' AS leak",
    "SELECT '${system:java.class.path}' AS leak",
    "SELECT '${spark.driver.extraJavaOptions}' AS leak",
    "SELECT * FROM read_files('/etc/passwd')",
    "SELECT * FROM csv.`/etc/passwd`",
    "SELECT * FROM IDENTIFIER('text.`/etc/passwd`')",
]


@pytest.mark.parametrize("sql", LEAKS)
def test_what_the_worker_is_and_holds_stays_out_of_answers(app: SparkWorker, sql: str) -> None:
    with pytest.raises(QueryRefused):
        call(app, {"sql": sql})


def test_the_analyzed_check_refuses_by_class_whatever_the_parsed_check_saw(
    app: SparkWorker,
) -> None:
    """The second fence alone: plans analysed here (analysis runs nothing of a query) and
    checked without the name check."""
    assert app.data is not None
    jsession = app.data.spark._jsparkSession
    state = jsession.sessionState()
    for sql, refused in [
        ("SELECT reflect('java.lang.System', 'getenv', 'HOME')", "CallMethodViaReflection"),
        ("SELECT current_user", "CurrentUser"),
        ("SELECT * FROM range(3)", "Range"),
    ]:
        plan = state.sqlParser().parsePlan(sql)
        analyzed = state.executePlan(plan, getattr(state, "executePlan$default$2")()).analyzed()
        with pytest.raises(QueryRefused, match=refused):
            sql_guard.check_analyzed(plan_tree.loads(analyzed.toJSON()))


def test_spark_threads_parse_with_the_session_conf(app: SparkWorker) -> None:
    """A JVM thread without an active session parses with Spark's defaults, which substitute
    `${env:X}`; the worker's Spark threads run with its session (substitution off)."""

    def handler(request: Any, data: Any) -> Any:
        conf = data.spark._jvm.org.apache.spark.sql.internal.SQLConf.get()
        return conf.variableSubstituteEnabled(), conf.getConfString("spark.sql.runSQLOnFiles")

    assert app.call(handler, make_request(b"")) == (False, "false")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT IDENTIFIER('upper')(city) AS c, system.builtin.lower(city) AS l, "
        "builtin.`abs`(-fare) AS f FROM IDENTIFIER('dataset') LIMIT 3",
        "SELECT transform(sequence(1, 3), x -> x * passengers) AS t, "
        "aggregate(array(1, 2), 0, (acc, x) -> acc + x) AS s FROM dataset LIMIT 3",
        "SELECT city, x FROM dataset LATERAL VIEW explode(array(1, 2)) t AS x LIMIT 3",
        "WITH t AS (SELECT city, fare FROM dataset) SELECT * FROM t PIVOT "
        "(avg(fare) FOR city IN ('Paris' AS paris, 'Lyon' AS lyon))",
        "SELECT lpad(cast(passengers AS string), 3, '0') AS p, repeat('*', 3) AS bar, "
        "date_format(pickup_time, 'yyyy-MM') AS month FROM dataset LIMIT 3",
        "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS v(n, s) ORDER BY n",
        "FROM dataset |> WHERE fare > 30 |> AGGREGATE count(*) AS n GROUP BY city",
        "SELECT /*+ BROADCAST(b) */ count(*) AS n FROM dataset a JOIN dataset b USING (trip_id)",
        "SELECT city, count(*) FROM dataset GROUP BY ALL ORDER BY ALL LIMIT ALL",
    ],
)
def test_what_queries_need_is_allowed(app: SparkWorker, sql: str) -> None:
    try:
        answer = call(app, {"sql": sql})
    except HandlerError as exc:  # pragma: no cover - the message says which part was refused
        pytest.fail(f"refused: {exc.message}")
    assert answer["row_count"] > 0
