"""The two SQL guards agree: every query of the corpus (`sql_corpus`) gets the same verdict
from the embedded guard (`sql_guard`, on the shared embedded session of tests/spark) and from
the Connect guard (`text_guard`, on the Spark Connect server of this folder), and the same
answer where both accept. Any disagreement fails.

Both sessions read the same dataset (`pipeline.trips`, deterministic) as their temp view
`dataset`. A query the Connect guard refuses never reaches the server; one it accepts is
analysed there (and its analysed plan checked), then run if the embedded guard accepted it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from spark_workers import (
    SparkWorkerSettings,
    connect,
    pipeline,
    sql_allowlist,
    sql_guard,
    text_guard,
)
from tests.spark_connect import sql_corpus
from tests.spark_connect.conftest import remote_mode_restored
from worker_sdk import HandlerError

pytestmark = [
    # The first test carries the Connect server's start: 85 s in a loaded CI run.
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:py4j.*"),
]

ROWS = 300
HOSTILE = sql_corpus.hostile()
CORPUS = [*sql_corpus.BENIGN, *HOSTILE]
STRICTER = list(sql_corpus.CONNECT_STRICTER)


def test_the_corpus_is_large_and_mixed() -> None:
    assert len(set(CORPUS)) >= 300 and not set(CORPUS) & set(STRICTER)
    assert len(sql_corpus.BENIGN) >= 90 and len(HOSTILE) >= 300


@pytest.fixture(scope="module")
def embedded(spark: Any) -> Iterator[Any]:
    df = pipeline.trips(spark, ROWS, 42).cache()
    df.createOrReplaceTempView("dataset")
    yield spark
    df.unpersist()


@pytest.fixture(scope="module")
def remote(embedded: Any, connect_url: str) -> Iterator[Any]:
    with remote_mode_restored():
        session = connect.build_remote_session(SparkWorkerSettings(remote=connect_url))
        cached, _ = connect.cache(pipeline.trips(session, ROWS, 42))
        cached.createOrReplaceTempView("dataset")
        # Another view of the session: only `dataset` may be read.
        session.range(3).createOrReplaceTempView("secret")
    yield session
    with remote_mode_restored():
        connect.release(session)


def verdict(run: Any) -> tuple[bool, Any]:
    """(accepted, DataFrame or the refusal)."""
    try:
        return True, run()
    except HandlerError as exc:
        return False, exc


def answer(df: Any) -> list[tuple[Any, ...]]:
    """The rows, floats to 9 significant digits."""
    return [tuple(_plain(v) for v in row) for row in df.limit(1000).collect()]


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.9g}")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return _plain(value.asDict())
    return value


@pytest.mark.parametrize("sql", CORPUS, ids=[f"q{i:03d}" for i in range(len(CORPUS))])
def test_both_guards_give_the_same_verdict_and_answer(embedded: Any, remote: Any, sql: str) -> None:
    embedded.range(3).createOrReplaceTempView("secret")
    try:
        ok_embedded, embedded_df = verdict(lambda: sql_guard.checked_sql(embedded, sql))
    finally:
        embedded.catalog.dropTempView("secret")
    with remote_mode_restored():
        ok_connect, connect_df = verdict(lambda: text_guard.checked_sql(remote, sql))
        assert ok_embedded == ok_connect, (
            f"embedded {'accepts' if ok_embedded else f'refuses ({embedded_df.message})'}, "
            f"Connect {'accepts' if ok_connect else f'refuses ({connect_df.message})'}: {sql}"
        )
        if not ok_embedded:
            return
        assert sql in sql_corpus.BENIGN, f"a hostile query is accepted by both guards: {sql}"
        expected, got = answer(embedded_df), answer(connect_df)
    # Compared as multisets: rows that tie on a query's ORDER BY come in either order (CI saw
    # two payments with 86 trips each swap places between the two sessions).
    assert sorted(got, key=repr) == sorted(expected, key=repr), sql


@pytest.mark.parametrize("sql", STRICTER)
def test_what_only_the_connect_guard_refuses_is_declared(embedded: Any, sql: str) -> None:
    """The one direction the guards may differ in, each case said and why (docs/spark.md):
    the Connect guard refuses, in the worker, what the embedded guard would serve. Never
    the other way (the test above)."""
    assert sql_guard.checked_sql(embedded, sql) is not None
    with pytest.raises(HandlerError):
        text_guard.checked_text(sql)


def test_the_analysed_plan_is_checked_again(remote: Any) -> None:
    """The second fence on its own: plans the server analysed (a plain query's analysis runs
    nothing) checked without the text check, which would have refused these first."""
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import SQL

    def plan(sql: str) -> str:
        return DataFrame(SQL(sql), remote)._explain_string(extended=True)  # type: ignore[arg-type]

    with remote_mode_restored():
        text_guard.check_analyzed_text(plan("SELECT city, count(*) AS n FROM dataset GROUP BY 1"))
        for sql in (
            "SELECT * FROM secret",
            "SELECT * FROM dataset WHERE trip_id IN (SELECT id FROM secret)",
            "WITH t AS (SELECT * FROM secret) SELECT * FROM t",
        ):
            with pytest.raises(sql_guard.QueryRefused, match="only the view 'dataset'"):
                text_guard.check_analyzed_text(plan(sql))
        with pytest.raises(sql_guard.QueryRefused, match="Range"):
            text_guard.check_analyzed_text(plan("SELECT * FROM range(3)"))


def test_no_function_left_out_passes_the_connect_guard(embedded: Any) -> None:
    """Every builtin function of the running Spark that `ALLOWED_FUNCTIONS` leaves out is
    refused by the Connect guard, whatever class sqlglot parses it into, with up to three
    arguments (the guard allows a sqlglot class only when an allowed name parses into it)."""
    registry = embedded._jsparkSession.sessionState().functionRegistry()
    names, found = registry.listFunction().iterator(), set()
    while names.hasNext():
        info = registry.lookupFunction(names.next())
        if info.isDefined():
            found.add(info.get().getName())
    left_out = sorted(
        name
        for name in found - sql_allowlist.ALLOWED_FUNCTIONS
        if name.replace("_", "a").isalnum()  # operators (`+`, `<=>`...) are syntax
    )
    assert len(left_out) > 100
    passed = []
    for name in left_out:
        for args in ("", "1", "1, 2", "'a', 'b', 'c'"):
            try:
                text_guard.checked_text(f"SELECT {name}({args}) AS x FROM dataset")
            except HandlerError:
                continue
            passed.append(f"{name}({args})")
    assert not passed
