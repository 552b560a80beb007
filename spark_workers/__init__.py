"""spark_workers: keyed PySpark workers for osrdyne, and the pipeline that feeds them.

A worker key names a dataset; the worker loads it once into a long-lived SparkSession and
answers many queries on it:

    app = SparkWorker(load=lambda spark, key: spark.read.parquet(f"/data/{key}"))

    @app.handler()
    def count(request: Request, data: LoadedDataset) -> int:
        return data.df.count()

    app.run()

`python -m spark_workers.query_worker` is the ready-made query worker, and
`python -m spark_workers.pipeline` makes the datasets it serves. See docs/spark.md.
"""

from spark_workers.cancellation import DeadlineExceeded, run_in_job_group
from spark_workers.catalog import Catalog, DatasetError, DatasetKey, DatasetLocation
from spark_workers.demo import demo_queries
from spark_workers.key_dataset import VIEW_NAME, LoadedDataset
from spark_workers.keyed import SparkWorker
from spark_workers.query import Query
from spark_workers.session import build_session, spark_conf
from spark_workers.settings import SparkWorkerSettings
from spark_workers.sql_guard import QueryRefused, QueryTooLarge, checked_sql

__all__ = [
    "Catalog",
    "DatasetError",
    "DatasetKey",
    "DatasetLocation",
    "DeadlineExceeded",
    "LoadedDataset",
    "Query",
    "QueryRefused",
    "QueryTooLarge",
    "SparkWorker",
    "SparkWorkerSettings",
    "VIEW_NAME",
    "build_session",
    "checked_sql",
    "demo_queries",
    "run_in_job_group",
    "spark_conf",
]
