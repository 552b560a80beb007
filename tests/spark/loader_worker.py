"""A keyed Spark worker as docs/spark.md shows a data engineer writing one: its own loader,
reading `$LOADER_ROOT/<key>` as Parquet (run by a driver as `python -m
tests.spark.loader_worker`). A key whose path is missing makes the loader raise."""

from __future__ import annotations

import os
from typing import Any

from spark_workers import LoadedDataset, SparkWorker
from worker_sdk import Request

app = SparkWorker(
    load=lambda spark, key: spark.read.parquet(os.path.join(os.environ["LOADER_ROOT"], key))
)


@app.handler()
def count(request: Request, data: LoadedDataset) -> dict[str, Any]:
    return {"rows": data.df.count()}


if __name__ == "__main__":
    app.run()
