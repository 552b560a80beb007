"""What the SQL guard costs: the same queries through `checked_sql` and through a bare
`spark.sql`, side by side in one Spark session, with the ratios.

    PYTHONPATH=. .venv/bin/python bench/guard_bench.py [--rows 200000] [--runs 40]

For each query, alternately: `spark.sql(q).collect()` (what the first version ran, unsafe),
`checked_sql(spark, q).collect()` (parse, check, analyse, check, run the checked plan), and
`checked_sql(spark, q)` alone (the guard's own work: no job runs). Medians and p95 in ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUERIES = {
    "filter+count": "SELECT count(*) AS n FROM dataset WHERE fare > 20 AND zone IN (1, 2, 3)",
    "group by": "SELECT zone, avg(fare) AS fare, count(*) AS n FROM dataset GROUP BY zone",
    "window": (
        "SELECT zone, fare, rank() OVER (PARTITION BY zone ORDER BY fare DESC) AS r "
        "FROM dataset QUALIFY r <= 3"
    ),
    "cte+subquery": (
        "WITH z AS (SELECT zone, max(fare) AS top FROM dataset GROUP BY zone) "
        "SELECT count(*) FROM dataset d JOIN z ON d.zone = z.zone WHERE d.fare > z.top / 2 "
        "AND d.zone IN (SELECT zone FROM z WHERE top > 10)"
    ),
}


def timed(run: Callable[[], Any], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        run()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    from spark_workers.sql_guard import checked_sql

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = spark.range(args.rows).selectExpr(
        "id", "CAST(id % 50 AS INT) AS zone", "(id * 7919 % 1000) / 10.0 AS fare"
    )
    frame.cache().createOrReplaceTempView("dataset")
    frame.count()

    print(f"{args.rows} rows cached, {args.runs} runs per variant, times in ms (median / p95)")
    print(f"{'query':<14} {'bare spark.sql':>16} {'guarded':>16} {'guard alone':>14} {'ratio':>7}")
    for name, sql in QUERIES.items():
        for _ in range(3):  # warm the JIT and Spark's caches for this query
            checked_sql(spark, sql).collect()
            spark.sql(sql).collect()
        bare: list[float] = []
        guarded: list[float] = []
        alone: list[float] = []
        for _ in range(args.runs):
            bare += timed(lambda: spark.sql(sql).collect(), 1)  # noqa: B023
            guarded += timed(lambda: checked_sql(spark, sql).collect(), 1)  # noqa: B023
            alone += timed(lambda: checked_sql(spark, sql), 1)  # noqa: B023

        def cell(samples: list[float]) -> str:
            p95 = statistics.quantiles(samples, n=20)[-1]
            return f"{statistics.median(samples):6.1f} / {p95:6.1f}"

        ratio = statistics.median(guarded) / statistics.median(bare)
        print(f"{name:<14} {cell(bare):>16} {cell(guarded):>16} {cell(alone):>14} {ratio:6.2f}x")
    spark.stop()


if __name__ == "__main__":
    main()
