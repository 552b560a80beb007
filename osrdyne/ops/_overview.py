"""The pool's counters and charts for the console, read from the controller's own Prometheus
registry, so the console and `/metrics` cannot disagree.

`counters` turns every counter of the registry into plain JSON (a metric added later shows up
without a change here); `histogram` gives a histogram's buckets; `RoutedHistory` samples the
requests routed by the fast path and by orphans every few seconds into a bounded ring, so the
console can draw their split over time without a Prometheus server.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

logger = logging.getLogger(__name__)

_PREFIX = "osrdyne_"


def counters(registry: CollectorRegistry) -> dict[str, Any]:
    """Every counter by short name (`orphans` for `osrdyne_orphans_total`): a number, or a
    map from its label values (joined by `/`) to numbers."""
    found: dict[str, Any] = {}
    for family in registry.collect():
        if family.type != "counter":
            continue
        name = family.name.removeprefix(_PREFIX)
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue  # `_created` timestamps
            if sample.labels:
                label = "/".join(str(v) for v in sample.labels.values())
                found.setdefault(name, {})[label] = sample.value
            else:
                found[name] = sample.value
    return found


def histogram(registry: CollectorRegistry, name: str) -> dict[str, Any] | None:
    """The buckets of an unlabelled histogram: `{"buckets": [[le, cumulative count]...],
    "count", "sum"}` (the `+Inf` bucket's bound as null); None when there is no such one."""
    for family in registry.collect():
        if family.type != "histogram" or family.name != name:
            continue
        buckets: list[list[float | None]] = []
        total = count = 0.0
        for sample in family.samples:
            if sample.name == f"{name}_bucket":
                bound = float(sample.labels["le"])
                buckets.append([None if math.isinf(bound) else bound, sample.value])
            elif sample.name == f"{name}_count":
                count = sample.value
            elif sample.name == f"{name}_sum":
                total = sample.value
        return {"buckets": buckets, "count": count, "sum": total}
    return None


@dataclasses.dataclass(frozen=True)
class RoutedSample:
    #: Epoch seconds.
    time: float
    #: Cumulative requests routed by each path at that time.
    fast: float
    orphan: float


class RoutedHistory:
    """The last `size` samples of the requests routed by path, one every `interval` seconds
    (720 every 5 s: the last hour)."""

    def __init__(
        self,
        read: Callable[[], dict[str, Any]],
        *,
        interval: float = 5.0,
        size: int = 720,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._read = read
        self.interval = interval
        self._clock = clock
        self.samples: collections.deque[RoutedSample] = collections.deque(maxlen=size)

    def sample(self) -> None:
        routed = self._read().get("requests_routed")
        routed = routed if isinstance(routed, dict) else {}
        self.samples.append(
            RoutedSample(
                time=self._clock(),
                fast=float(routed.get("fast", 0.0)),
                orphan=float(routed.get("orphan", 0.0)),
            )
        )

    async def run(self) -> None:
        """Sample until cancelled; a failed sample is logged and the next one taken."""
        while True:
            try:
                self.sample()
            except Exception:  # the console's chart must not end the API
                logger.exception("cannot sample the routed requests")
            await asyncio.sleep(self.interval)
