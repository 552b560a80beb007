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


def _sockets(spark: Any) -> list[Any]:
    gateway = spark.sparkContext._gateway
    field = gateway.jvm.py4j.GatewayServer._java_lang_class.getDeclaredField("connections")
    field.setAccessible(True)
    return [c.getSocket() for c in field.get(gateway.java_gateway_server).toArray()]


def test_every_connection_open_gets_no_delay(spark: Any) -> None:
    set_now = jvm.no_delay(spark)
    sockets = _sockets(spark)
    assert set_now == len(sockets) >= 1
    assert all(s.getTcpNoDelay() for s in sockets)


def test_a_thread_running_a_request_has_its_connection_set(spark: Any) -> None:
    """A new thread gets a new py4j connection: its first request's work sets it."""
    client = spark.sparkContext._gateway._gateway_client

    def work() -> tuple[int, int]:
        count = spark.range(3).count()
        # This thread's connection, by its port as the JVM sees it.
        return count, client.get_thread_connection().socket.getsockname()[1]

    seen: dict[str, Any] = {}

    def request() -> None:
        seen["count"], seen["port"] = cancellation.run_in_job_group(
            spark, work, timeout=120, description="no-delay test"
        )

    thread = threading.Thread(target=request, name="no-delay test")
    thread.start()
    thread.join(180)
    assert seen["count"] == 3
    ours = [s for s in _sockets(spark) if s.getPort() == seen["port"]]
    assert len(ours) == 1
    assert ours[0].getTcpNoDelay()


def test_an_answer_over_8_kb_comes_back_whole(spark: Any) -> None:
    text = "x" * 50_000 + "é"
    assert spark._jvm.java.util.Objects.toString(text) == text
