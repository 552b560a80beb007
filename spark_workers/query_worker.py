"""The query worker: serves one dataset (its key) to structured queries and Spark SQL.

    python -m spark_workers.query_worker        # WORKER_* from the driver, SPARK_WORKER_* too

Endpoints (`x-rpc-path`):

- none or `query`: a query document (see `spark_workers.query`) answered with JSON rows, or
  an Arrow IPC stream with `"format": "arrow"`;
- `schema`: the dataset's columns and types, its row count, the version read and its
  manifest (`spark_workers.manifest`) when `pipeline ingest` wrote it;
- `count`: the number of rows matching an optional `{"where": [...]}`;
- `status`: what the worker serves (key, pinned version, rows) and its caches' counts.

On a key that pins a dataset version (`name@version`), `query` and `count` answers are kept
and answered again without Spark (`spark_workers.result_cache`; the header `x-result-cache`
says `hit` or `miss`).

Every failure a client can cause (bad JSON, a document over the size limits, unknown column,
refused SQL, too large a result, the deadline, a query that exhausted the JVM) is answered
with a `worker_error` response and a JSON body saying why. SQL and structured queries alike
go through `sql_guard` before Spark runs anything; on a Spark Connect worker, SQL text goes
through `text_guard` before the server receives anything.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import threading
import weakref
from typing import TYPE_CHECKING, Any

from spark_workers import catalog, key_dataset, keyed, manifest, query, results, sql_guard
from spark_workers import settings as settings_mod
from worker_sdk import HandlerError, Request

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class PlanCache:
    """Planned DataFrames by query document: a repeated query skips parsing, analysis,
    optimisation and code generation (a Dataset keeps its executed plan), which on cached
    data cost more than running it. Safe because a worker's dataset never changes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._plans: collections.OrderedDict[Any, DataFrame] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._plans)

    def get(self, data: key_dataset.LoadedDataset, q: query.Query) -> DataFrame:
        key = q.model_dump_json(exclude={"format"})
        with self._lock:
            df = self._plans.get(key)
            if df is not None:
                self._plans.move_to_end(key)
                self.hits += 1
                return df
        df = _plan(data, q)
        with self._lock:
            self.misses += 1
            if self.size:
                self._plans[key] = df
                while len(self._plans) > self.size:
                    self._plans.popitem(last=False)
        return df


def _plan(data: key_dataset.LoadedDataset, q: query.Query) -> DataFrame:
    # Once per planned query: a DataFrame keeps its schema, and a Connect DataFrame made
    # afresh would ask the server for it on every collection (one more round trip).
    return data.backend.bounded(_checked(data, q), max_rows=data.settings.max_rows)


def _checked(data: key_dataset.LoadedDataset, q: query.Query) -> DataFrame:
    limits = guard_limits(data.settings)
    if q.sql is not None:
        df = data.backend.client_sql(data.spark, q.sql, view=key_dataset.VIEW_NAME, limits=limits)
        return df.limit(q.limit) if q.limit is not None else df
    return query.build(data.df, q, view=key_dataset.VIEW_NAME, limits=limits)


def guard_limits(settings: settings_mod.SparkWorkerSettings) -> sql_guard.Limits:
    """The guard's bounds from the worker's settings."""
    return sql_guard.Limits(
        max_sql_chars=settings.max_sql_chars,
        max_generated=settings.max_generated,
        max_plan_nodes=settings.max_plan_nodes,
    )


def plan_cache(data: key_dataset.LoadedDataset) -> PlanCache:
    """The plan cache of a loaded dataset."""
    cache = data.extras.get("plan_cache")
    if cache is None:
        cache = data.extras.setdefault("plan_cache", PlanCache(data.settings.plan_cache_size))
    return cache  # type: ignore[no-any-return]


#: Characters after which SQL text is kept as sent (a quoted string or a comment, where
#: whitespace is part of the meaning).
_QUOTES_OR_COMMENTS = re.compile(r"['\"`]|--|/\*")


def cache_key(request: Request, data: key_dataset.LoadedDataset) -> str:
    """The query of `request` in a normal form, for the result cache: the parsed document
    (every field, in a fixed order, defaults filled in: `{"limit": 5, "select": ["a"]}` and
    `{"select": ["a"], "limit": 5, "where": []}` are one query), SQL text stripped, and its
    whitespace runs made one space when it holds no quote and no comment."""
    q = parsed(request, data.settings)
    if q.sql is not None:
        sql = q.sql.strip()
        if not _QUOTES_OR_COMMENTS.search(sql):
            sql = " ".join(sql.split())
        q = q.model_copy(update={"sql": sql})
    return q.model_dump_json()


def answer_status(
    request: Request, data: key_dataset.LoadedDataset, *, app: keyed.SparkWorker
) -> dict[str, Any]:
    """What this worker serves and its caches' counts."""
    plans = data.extras.get("plan_cache")
    return {
        "key": data.key,
        "version": app.version,
        "rows": data.rows,
        "cached": app.cached.is_set(),
        "result_cache": app.results.status() if app.results is not None else None,
        "plan_cache": (
            {"hits": plans.hits, "misses": plans.misses, "entries": len(plans)}
            if isinstance(plans, PlanCache)
            else None
        ),
    }


#: Each request's parsed document, parsed once for its cache key and its answer.
_PARSED: weakref.WeakKeyDictionary[Request, query.Query] = weakref.WeakKeyDictionary()


def parsed(request: Request, settings: settings_mod.SparkWorkerSettings) -> query.Query:
    """`request`'s query document, parsed and bounded (`query.parse`), once per request."""
    q = _PARSED.get(request)
    if q is None:
        q = _PARSED[request] = query.parse(request.body, settings)
    return q


def answer_query(request: Request, data: key_dataset.LoadedDataset) -> Any:
    """The default endpoint: run a query document."""
    return run_query(data, parsed(request, data.settings))


def run_query(data: key_dataset.LoadedDataset, q: query.Query) -> Any:
    """Run a parsed query on the loaded dataset; JSON-able dict or Arrow IPC bytes."""
    s = data.settings
    try:
        df = plan_cache(data).get(data, q)
        table, truncated = results.collect(df, max_rows=s.max_rows)
    except HandlerError:
        raise
    except Exception as exc:
        raise HandlerError(
            f"query failed: {_spark_message(exc)}", details={"reason": "query_failed"}
        ) from exc
    if q.format == "arrow":
        return results.to_arrow_ipc(table, truncated=truncated, max_bytes=s.max_result_bytes)
    return results.to_json(table, truncated=truncated, max_bytes=s.max_result_bytes)


def answer_schema(
    request: Request, data: key_dataset.LoadedDataset, *, cat: catalog.Catalog | None = None
) -> dict[str, Any]:
    """The dataset's schema and size; the version read and its manifest when known."""
    location = cat.loaded.get(data.key) if cat is not None else None
    described = None
    if location is not None and os.path.isdir(location.uri):
        described = manifest.read(location.uri)
    return {
        "key": data.key,
        "version": location.version if location is not None else None,
        "manifest": described,
        "view": key_dataset.VIEW_NAME,
        "columns": [
            {"name": f.name, "type": f.dataType.simpleString(), "nullable": f.nullable}
            for f in data.df.schema.fields
        ],
        "rows": data.rows if data.rows is not None else data.df.count(),
    }


def answer_count(request: Request, data: key_dataset.LoadedDataset) -> dict[str, int]:
    """Rows matching the optional `where` conditions."""
    q = parsed(request, data.settings)
    if q.sql is not None or q.select is not None or q.group_by or q.aggregates:
        raise HandlerError("count takes only 'where' conditions", details={"reason": "invalid"})
    try:
        df = query.build(data.df, q, view=key_dataset.VIEW_NAME, limits=guard_limits(data.settings))
        return {"count": df.count()}
    except HandlerError:
        raise
    except Exception as exc:
        raise HandlerError(f"count failed: {_spark_message(exc)}") from exc


def create_app(settings: settings_mod.SparkWorkerSettings | None = None) -> keyed.SparkWorker:
    """The query worker, reading its dataset through the catalog of `settings`."""
    settings = settings if settings is not None else settings_mod.SparkWorkerSettings()
    cat = catalog.Catalog.from_settings(settings)
    app = keyed.SparkWorker(
        load=cat.load, validate=cat.resolve, pinned=cat.pinned_version, settings=settings
    )
    app.handler(cache_key=cache_key)(answer_query)
    app.handler("query", cache_key=cache_key)(answer_query)
    app.handler("schema")(functools.partial(answer_schema, cat=cat))
    app.handler("count", cache_key=cache_key)(answer_count)
    app.handler("status")(functools.partial(answer_status, app=app))
    return app


def _spark_message(exc: BaseException) -> str:
    getter = getattr(exc, "getMessage", None)
    try:
        text = getter() if callable(getter) else str(exc)
    except Exception:
        text = str(exc)
    return str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__


if __name__ == "__main__":
    create_app().run()
