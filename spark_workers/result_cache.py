"""The answers of a keyed worker whose dataset version never changes, kept in memory.

A dataset version (`name@version`, `spark_workers.versions`) is written once and never
again, so a query's answer on it is the same every time it is asked: dashboards and services
asking the same questions again are answered from memory, without Spark (a repeated query on
cached data still costs its planning and its job: tens of milliseconds embedded, more over
Spark Connect, which plans each run again).

- **Only for a pinned version.** A worker keeps answers only when its key names a version
  that cannot move (`Catalog.pinned_version`: `name@version`, its directory itself, not a
  link). The key `name` follows a link that an ingest or an append moves: its worker never
  keeps an answer (a new worker of `name` would read the new version; the answers of the
  old one must not outlive it).
- **Keyed by what decides the answer**: the endpoint (`x-rpc-path`), the version, and the
  query in a normal form (its parsed document, fields in a fixed order, defaults filled in:
  two spellings of one query are one entry; `query_worker.cache_key`).
- **Bounded in bytes** (`result_cache_bytes`, 0: off): the least recently used answers go
  first; an answer larger than an eighth of the bound is not kept (one large answer would
  push out many small ones).
- **Said on the answer**: the header `x-result-cache` is `hit` (from memory) or `miss`
  (computed, and kept); absent when the worker keeps no answer for the request.
- **Counted**: hits, misses, stores, evictions and refusals (too large) in the worker's
  metrics (`osrdyne_spark_result_cache_total`, with `WORKER_METRICS_PORT`) and its `status`
  endpoint.

Errors are never kept: a query that failed is run again the next time it is asked.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import weakref
from collections.abc import Hashable
from typing import Any

#: The header on an answer that says whether it came from the cache.
HEADER = "x-result-cache"
HIT, MISS = "hit", "miss"
#: What is counted (`stats`, `osrdyne_spark_result_cache_total{outcome}`).
OUTCOMES = ("hit", "miss", "stored", "evicted", "too_large")
#: The largest share of the bound one answer may take.
_LARGEST_SHARE = 8
#: Bytes counted for an entry beyond its body (the key, the bookkeeping): a bound on the
#: memory of many tiny answers.
_OVERHEAD = 256


@dataclasses.dataclass(frozen=True)
class Answer:
    """A kept answer: its encoded body and content type."""

    body: bytes
    content_type: str | None


class ResultCache:
    """An LRU of answers bounded in bytes; safe to use from handler threads."""

    def __init__(self, max_bytes: int, *, registry: Any = None) -> None:
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[Hashable, Answer] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        #: The outcomes in the worker's metrics, when it has some (a prometheus registry).
        self._counter = _counter(registry) if registry is not None else None

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Answer | None:
        with self._lock:
            answer = self._entries.get(key)
            if answer is not None:
                self._entries.move_to_end(key)
            outcome = "miss" if answer is None else "hit"
            self.stats[outcome] += 1
        self._count(outcome)
        return answer

    def put(self, key: Hashable, answer: Answer) -> bool:
        """Keep `answer` for `key`; False when it is too large to be kept."""
        size = _size(answer)
        if size * _LARGEST_SHARE > self.max_bytes:
            with self._lock:
                self.stats["too_large"] += 1
            self._count("too_large")
            return False
        evicted = 0
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= _size(old)
            self._entries[key] = answer
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= _size(dropped)
                evicted += 1
            self.stats["stored"] += 1
            self.stats["evicted"] += evicted
        self._count("stored")
        for _ in range(evicted):
            self._count("evicted")
        return True

    def status(self) -> dict[str, int]:
        """What the worker's `status` endpoint says of the cache."""
        with self._lock:
            return {
                **self.stats,
                "entries": len(self._entries),
                "bytes": self._bytes,
                "max_bytes": self.max_bytes,
            }

    def _count(self, outcome: str) -> None:
        if self._counter is not None:
            self._counter.labels(outcome).inc()


#: One counter per registry (a worker that loads its dataset again keeps counting in it).
_COUNTERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _counter(registry: Any) -> Any:
    counter = _COUNTERS.get(registry)
    if counter is not None:
        return counter
    from prometheus_client import Counter  # only where the worker has metrics

    counter = _COUNTERS[registry] = Counter(
        "osrdyne_spark_result_cache_total",
        "Answers of the result cache of this worker's pinned dataset version, by outcome: "
        "hit (answered from memory), miss (computed), stored (kept), evicted (dropped for "
        "room), too_large (not kept).",
        ["outcome"],
        registry=registry,
    )
    for outcome in OUTCOMES:
        counter.labels(outcome)
    return counter


def _size(answer: Answer) -> int:
    return len(answer.body) + _OVERHEAD
