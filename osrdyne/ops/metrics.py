"""Prometheus metrics of a controller, on a registry of its own (several controllers can live
in one process, as in tests). `/metrics` of the HTTP API serves it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.orphans = Counter(
            "osrdyne_orphans_total", "Orphan requests handled, by outcome.", ["outcome"], registry=r
        )
        self.orphan_seconds = Histogram(
            "osrdyne_orphan_handling_seconds",
            "From an orphan's arrival to its confirmed republish into its new queue.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.cold_start_seconds = Histogram(
            "osrdyne_cold_start_seconds",
            "From a new group being required by an orphan to its first worker's `ready` report "
            "(groups whose workers never report `ready` are not measured).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.dead_letters = Counter(
            "osrdyne_dead_letters_total",
            "Dead-lettered requests, by reason.",
            ["reason"],
            registry=r,
        )
        self.dead_letters_unanswerable = Counter(
            "osrdyne_dead_letters_without_reply_to_total",
            "Dead-lettered requests that had no reply_to (logged and dropped).",
            registry=r,
        )
        self.poison = Counter(
            "osrdyne_poison_total", "Requests moved to the poison queue.", registry=r
        )
        self.invalid_keys = Counter(
            "osrdyne_invalid_keys_total", "Requests answered `invalid_key`.", registry=r
        )
        self.activity = Counter(
            "osrdyne_activity_events_total",
            "Activity reports received, by event.",
            ["event"],
            registry=r,
        )
        self.activity_folded = Counter(
            "osrdyne_activity_folded_total",
            "Activity reports folded into an earlier tracker update.",
            registry=r,
        )
        self.unprocessable = Counter(
            "osrdyne_unprocessable_messages_total",
            "Messages a controller consumer gave up on (answered invalid_request and/or kept "
            "in the poison queue), by the queue they came from.",
            ["queue"],
            registry=r,
        )
        self.activity_ignored = Counter(
            "osrdyne_activity_ignored_total",
            "Activity reports for keys that have no group (only orphans create groups).",
            registry=r,
        )
        self.activity_malformed = Counter(
            "osrdyne_activity_malformed_total", "Activity reports skipped as malformed.", registry=r
        )
        self.driver_calls = Counter(
            "osrdyne_driver_calls_total",
            "Driver calls, by operation and outcome.",
            ["op", "outcome"],
            registry=r,
        )
        self.queue_ops = Counter(
            "osrdyne_queue_operations_total",
            "Request-queue operations applied.",
            ["op"],
            registry=r,
        )
        self.loop_seconds = Histogram(
            "osrdyne_control_loop_iteration_seconds",
            "Duration of one control-loop pass.",
            ["loop"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.group_workers = Gauge(
            "osrdyne_group_workers",
            "Workers of the pool's scaled groups, summed: `desired` by the group scaler, "
            "`current` run by the driver.",
            ["state"],
            registry=r,
        )
        self.scaling_decisions = Counter(
            "osrdyne_scaling_decisions_total",
            "Group resizes the group scaler decided, by reason.",
            ["reason"],
            registry=r,
        )
        self.scaling_saturated = Gauge(
            "osrdyne_scaling_saturated_groups",
            "Groups that need more workers than their maximum or the driver's capacity allows.",
            registry=r,
        )
        self.groups = Gauge(
            "osrdyne_worker_groups", "Expected worker groups, by state.", ["state"], registry=r
        )
        self.generation_lag = Gauge(
            "osrdyne_generation_lag",
            "Tracker generation minus the generation a loop reached.",
            ["loop"],
            registry=r,
        )
        self.standby_workers = Gauge(
            "osrdyne_standby_workers",
            "Standby workers the driver keeps running, not yet keyed (a new key takes one).",
            registry=r,
        )
        self.leader = Gauge(
            "osrdyne_leader", "1 while this controller is the pool's acting leader.", registry=r
        )
        self.requests_routed = Counter(
            "osrdyne_requests_routed_total",
            "Client requests routed, by path: `orphan` (no bound queue: handled by the orphan "
            "processor, counted exactly) or `fast` (straight into a bound request queue; "
            "estimated from the broker's request-exchange statistics, see "
            "docs/observability.md).",
            ["path"],
            registry=r,
        )
        self.admission_refusals = Counter(
            "osrdyne_admission_refusals_total",
            "New keys answered `overloaded`, by reason (`max_groups`, `driver_capacity`, "
            "`broker_fd`, `broker_processes`, `broker_memory_alarm`, `broker_disk_alarm`).",
            ["reason"],
            registry=r,
        )
        self.queue_op_concurrency = Gauge(
            "osrdyne_queue_op_concurrency",
            "Request-queue operations (declare, bind, unbind, delete) the queue loop runs at "
            "once now: raised while the broker keeps up, halved when it does not.",
            registry=r,
        )
        self.admission_limit = Gauge(
            "osrdyne_admission_limit",
            "Most groups at once, by limit (`max_groups`, `driver_capacity`; absent: none), "
            "and `broker_room`: new request queues the broker can still take.",
            ["limit"],
            registry=r,
        )
        self.broker_used = Gauge(
            "osrdyne_broker_resource_used",
            "The broker's use of a resource (`fd`, `processes`, `memory` bytes, `queues`), as "
            "last read from its management API (its most constrained node).",
            ["resource"],
            registry=r,
        )
        self.broker_limit = Gauge(
            "osrdyne_broker_resource_limit",
            "The broker's limit of a resource (`fd`, `processes`, `memory` bytes).",
            ["resource"],
            registry=r,
        )
        self.broker_alarm = Gauge(
            "osrdyne_broker_alarm",
            "1 while the broker has an alarm (`memory`, `disk`).",
            ["alarm"],
            registry=r,
        )
        self.broker_node = Gauge(
            "osrdyne_broker_node",
            "Per broker node: `running` (1/0), `partitions` (nodes it cannot reach), "
            "`pool_connections`, `queue_leaders` (the pool's request queues led from it), "
            "`members_missing` (the pool's quorum queues with a member there not online).",
            ["node", "figure"],
            registry=r,
        )
        self.exchange_published = Gauge(
            "osrdyne_request_exchange_published",
            "The broker's cumulative `publish_in` of the pool's request exchange (client "
            "requests plus the controller's orphan republishes), as last read.",
            registry=r,
        )
        self.groups_failing = Gauge(
            "osrdyne_groups_failing",
            "Groups whose workers keep failing to start (their requests are answered "
            "`start_failed` at once).",
            registry=r,
        )
        self.failed_starts = Counter(
            "osrdyne_failed_starts_total",
            "Failed worker starts, by how the controller heard of them: a worker's own "
            "`start-failed` report (`report`) or the exit of a worker that never served (`exit`).",
            ["source"],
            registry=r,
        )
        self.start_failed_answers = Counter(
            "osrdyne_start_failed_answers_total",
            "Requests of failing groups answered `start_failed` (`answered`), or acked without "
            "an answer for want of a reply_to (`no_reply_to`).",
            ["outcome"],
            registry=r,
        )


class ColdStartClock:
    """Times cold starts: from the orphan that required a new group to its first report."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._began: dict[str, float] = {}

    def begin(self, key: str, at: float) -> None:
        if len(self._began) > 10_000:  # groups that never reported `ready`: forget them
            self._began = {k: t for k, t in self._began.items() if at - t < 3600}
        self._began.setdefault(key, at)

    def end(self, key: str, at: float) -> None:
        began = self._began.pop(key, None)
        if began is not None:
            self._histogram.observe(at - began)


class FastPathEstimate:
    """Turns the request exchange's `publish_in` into a count of fast-path requests.

    Every client request enters the request exchange once; an orphan enters it a second time
    when the orphan processor republishes it, and an `invalid_key` orphan only once. So, since
    the first reading: fast = published - 2 * forwarded - invalid_keys. The broker refreshes
    its statistics every few seconds, so the estimate lags; the counter only moves forward.
    """

    def __init__(self, metrics: ControllerMetrics) -> None:
        self._metrics = metrics
        self._baseline: tuple[float, float, float] | None = None
        self._reported = 0.0

    def observe(self, published: float) -> None:
        m = self._metrics
        forwarded = m.orphans.labels("forwarded")._value.get()
        invalid = m.orphans.labels("invalid_key")._value.get()
        m.exchange_published.set(published)
        if self._baseline is None or published < self._baseline[0]:  # first or broker reset
            self._baseline = (published, forwarded, invalid)
            self._reported = 0.0
            return
        p0, f0, i0 = self._baseline
        fast = (published - p0) - 2 * (forwarded - f0) - (invalid - i0)
        if fast > self._reported:
            m.requests_routed.labels("fast").inc(fast - self._reported)
            self._reported = fast
