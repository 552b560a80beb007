"""py4j's connections to the worker's JVM send without Nagle's algorithm (`jvm.no_delay`).

With it on, py4j 0.10.9.9 answered every call whose answer is over 8 KB 40 ms late (py4j#516:
two writes, the second held until the Python side's delayed ACK). Measured, not asserted
here: the SQL guard's 60 ms for a grouped and sorted client query, 11 ms without it
(bench/query_bench.py). These tests check the sockets' option on the real JVM, for the
session's own connection and for a thread that runs a request's Spark work.
"""

from __future__ import annotations

import threading
from typing import Any

from spark_workers import cancellation, jvm


def _own_socket(spark: Any) -> Any:
    """The JVM's end of this thread's py4j connection (by the port the JVM sees)."""
    python_end = spark.sparkContext._gateway._gateway_client.get_thread_connection().socket
    ours = [s for s in jvm.py4j_sockets(spark) if s.getPort() == python_end.getsockname()[1]]
    assert len(ours) == 1
    return ours[0]


def test_every_connection_open_gets_no_delay(spark: Any) -> None:
    spark.range(1).count()  # this thread's connection exists
    assert jvm.no_delay(spark) >= 1
    assert _own_socket(spark).getTcpNoDelay()


def test_a_thread_running_a_request_has_its_connection_set(spark: Any) -> None:
    """A new thread gets a new py4j connection: its first request's work sets it."""

    seen: dict[str, Any] = {}

    def work() -> None:
        seen["count"] = spark.range(3).count()
        seen["no delay"] = _own_socket(spark).getTcpNoDelay()

    def request() -> None:
        cancellation.run_in_job_group(spark, work, timeout=120, description="no-delay test")

    thread = threading.Thread(target=request, name="no-delay test")
    thread.start()
    thread.join(180)
    assert seen == {"count": 3, "no delay": True}


def test_an_answer_over_8_kb_comes_back_whole(spark: Any) -> None:
    text = "x" * 50_000 + "é"
    assert spark._jvm.java.util.Objects.toString(text) == text
