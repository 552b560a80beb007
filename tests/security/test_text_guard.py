"""The Connect guard's first fence on its own: the text check (sqlglot in the worker, no JVM,
no server) refuses every command, every reflective call and every refused function in every
spelling of the corpus before anything is sent, and lets the plain queries through.

The quick tier's test of `spark_workers` (`scripts/test.sh --quick` runs no JVM); the
differential test (tests/spark_connect/test_guards_agree.py) checks the whole guard, analysed
plans included, against the embedded one.
"""

from __future__ import annotations

import pytest

from spark_workers import text_guard
from tests.spark_connect import sql_corpus
from worker_sdk import HandlerError

REFUSED_BY_TEXT = list(
    dict.fromkeys(
        [
            *(sql.format(target="/tmp/osrdyne-never-written") for sql in sql_corpus.COMMANDS),
            *sql_corpus.REFLECTION,
            *(
                spelling.format(f=name, F=name.upper(), a=sql_corpus.ARGUMENTS[name])
                for name in sql_corpus.REFUSED
                for spelling in sql_corpus.SPELLINGS
            ),
        ]
    )
)

PLAIN = [
    "SELECT city, count(*) AS n FROM dataset GROUP BY city ORDER BY n DESC",
    "SELECT avg(fare) AS mean, max(distance_km) AS far FROM dataset WHERE fare > 10",
    "WITH t AS (SELECT city, fare FROM dataset) SELECT city, sum(fare) FROM t GROUP BY 1",
]


def test_the_corpus_has_every_kind() -> None:
    assert len(sql_corpus.COMMANDS) >= 5 and len(sql_corpus.REFLECTION) >= 5
    assert len(REFUSED_BY_TEXT) >= 300


@pytest.mark.parametrize("sql", REFUSED_BY_TEXT[:1] + REFUSED_BY_TEXT[-1:])
def test_a_refusal_says_why(sql: str) -> None:
    with pytest.raises(HandlerError) as refused:
        text_guard.checked_text(sql)
    assert str(refused.value)


def test_commands_reflection_and_refused_functions_never_leave_the_worker() -> None:
    passed = []
    for sql in REFUSED_BY_TEXT:
        try:
            text_guard.checked_text(sql)
        except HandlerError:
            continue
        passed.append(sql)
    assert not passed


@pytest.mark.parametrize("sql", PLAIN)
def test_plain_queries_pass_the_text_check(sql: str) -> None:
    assert text_guard.checked_text(sql)
