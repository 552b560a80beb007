"""The allowlists match the Spark that runs: every allowed function exists and its documented
examples pass the guard (their resolved classes are allowed), and the functions left out are
refused by name. A Spark upgrade that renames a class or adds a spelling fails here first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_workers import QueryRefused, sql_allowlist, sql_guard
from worker_sdk import HandlerError

pytestmark = pytest.mark.timeout(240)

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"

#: Left out on purpose (see `sql_allowlist`), one of each family.
REFUSED = [
    "reflect",
    "java_method",
    "try_reflect",
    "input_file_name",
    "current_user",
    "session_user",
    "current_database",
    "version",
    "raise_error",
    "assert_true",
    "xpath_string",
    "from_xml",
    "from_protobuf",
    "format_string",
    "printf",
    "window",
    "session_window",
    "aes_decrypt",
    "hll_sketch_agg",
    "parse_json",
    "spark_partition_id",
]


@pytest.fixture(scope="module")
def functions(spark: Any) -> dict[str, Any]:
    """Spark's builtin functions: name -> ExpressionInfo."""
    registry = spark._jsparkSession.sessionState().functionRegistry()
    found, names = {}, registry.listFunction().iterator()
    while names.hasNext():
        info = registry.lookupFunction(names.next())
        if info.isDefined():
            found[info.get().getName()] = info.get()
    return found


def examples(info: Any) -> list[str]:
    lines = (info.getExamples() or "").splitlines()
    return [ln.strip()[2:].rstrip(";") for ln in lines if ln.strip().lower().startswith("> select")]


def test_allowed_functions_exist_and_their_examples_pass_the_guard(
    spark: Any, functions: dict[str, Any]
) -> None:
    assert not sorted(sql_allowlist.ALLOWED_FUNCTIONS - set(functions))
    refused = []
    for name in sorted(sql_allowlist.ALLOWED_FUNCTIONS):
        for sql in examples(functions[name]):
            try:
                sql_guard.checked_sql(spark, sql)
            except HandlerError as exc:
                reason = exc.details["reason"]
                by_design = name == "sequence" and "integer constants" in exc.message
                if reason not in ("syntax", "analysis") and not by_design:
                    refused.append(f"{name}: {sql} -> {exc.message}")
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize("name", REFUSED)
def test_functions_left_out_are_refused(spark: Any, functions: dict[str, Any], name: str) -> None:
    assert name in functions  # a real function, not a typo
    with pytest.raises(QueryRefused, match=f"function '{name}' is not allowed"):
        sql_guard.checked_sql(spark, f"SELECT {name}(1)")


def test_the_documented_list_is_the_allowlist() -> None:
    text = DOC.read_text().split("<!-- allowed-functions -->", 1)[1].split("```")[1]
    documented = {
        word for line in text.splitlines() if line.startswith("    ") for word in line.split()
    }
    assert documented == sql_allowlist.ALLOWED_FUNCTIONS
