"""The query worker plus a `slow` endpoint whose Spark job runs until it is cancelled: what a
runaway query looks like to the worker, without client SQL (refused over Spark Connect)."""

from __future__ import annotations

from spark_workers import LoadedDataset, query_worker
from worker_sdk import Request


def slow(request: Request, data: LoadedDataset) -> int:
    """A job of a few hours on one core: only its cancellation ends it."""
    from pyspark.sql import functions as F  # noqa: N812

    df = data.spark.range(0, 10**13, 1, 1).select(F.sum(F.col("id") % 7).alias("s"))
    return int(df.collect()[0]["s"])


if __name__ == "__main__":
    app = query_worker.create_app()
    app.handler("slow")(slow)
    app.run()
