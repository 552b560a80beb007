"""Example query documents for the sample `trips` dataset (`pipeline generate`).

The README demo and the benchmark send these; they also show the query language at a glance.
"""

from __future__ import annotations

from typing import Any


def demo_queries() -> dict[str, dict[str, Any]]:
    """Named query documents valid against `pipeline generate --kind trips` data."""
    return {
        "long_trips": {
            "select": ["trip_id", "city", "distance_km", "fare"],
            "where": [{"column": "distance_km", "op": ">", "value": 40}],
            "order_by": ["-fare"],
            "limit": 5,
        },
        "fare_by_city": {
            "group_by": ["city"],
            "aggregates": [
                {"fn": "count", "as": "trips"},
                {"fn": "avg", "column": "fare", "as": "avg_fare"},
            ],
            "order_by": [{"column": "trips", "desc": True}],
        },
        "sql_payment_mix": {
            "sql": "SELECT payment, count(*) AS trips, round(sum(tip), 2) AS tips "
            "FROM dataset WHERE passengers >= 2 GROUP BY payment ORDER BY trips DESC",
        },
        "arrow_sample": {
            "sql": "SELECT * FROM dataset ORDER BY trip_id LIMIT 100",
            "format": "arrow",
        },
    }
