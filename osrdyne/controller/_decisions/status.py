"""The status document: what a controller knows of its pool, as one typed value.

The controller builds it (`Controller.report()`), the HTTP API serves it as JSON (`/status`),
and the CLI (`osrdyne status`, `watch`) reads it back into the same models, so the three
cannot disagree on a field. docs/observability.md describes every field.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Mapping

import pydantic

from drivers.base import WorkerInfo
from osrdyne.controller._decisions.pool_state import GroupStatus


class Role(enum.StrEnum):
    """What a controller is doing for its pool."""

    #: No session: the broker is unreachable, or between sessions.
    CONNECTING = "connecting"
    #: Connected, waiting for leadership.
    STANDBY = "standby"
    #: Acting for the pool.
    LEADER = "leader"


class GroupState(enum.StrEnum):
    """Where a group is in its life, as the status document shows it."""

    ACTIVE = "active"
    UNBOUND = "unbound"
    #: No longer expected: its queue and workers are being removed.
    STOPPING = "stopping"
    #: A request queue the controller does not track (yet).
    UNKNOWN = "unknown"


class Health(enum.StrEnum):
    """Whether a group keeps up, as its queue and its workers' reports tell."""

    OK = "ok"
    #: Requests are delivered to its workers, unanswered, and none of them has reported
    #: activity for `groups.stall_after` seconds: its workers hang (see the worker watchdog).
    STALLED = "stalled"
    #: Its workers keep failing to start (`groups.failing_after` within `failing_window`):
    #: its requests are answered `start_failed` at once until a worker serves.
    FAILING = "failing"


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class Generations(_Model):
    """The expected state's generation, and the one each control loop last converged to."""

    tracker: int
    queues: int
    groups: int


class Leader(_Model):
    """The controller that leads the pool, as the broker names its connection."""

    #: `host:pid:id` of the leading controller.
    instance: str
    #: Base URL of its HTTP API, when it advertised one (`api.advertise_url`).
    api: str | None = None


class ScalingReport(_Model):
    """What the group scaler knows and decided of one group (None where not measured yet)."""

    #: Workers the scaler wants the group to run.
    desired: int
    #: Workers the driver runs for it now.
    current: int
    #: Why it has that size (`osrdyne.controller._decisions.scaling.Reason`).
    reason: str
    #: Ready messages at the last reading.
    backlog: int | None = None
    #: Requests per second arriving, and one busy worker's answers per second.
    arrival_rate: float | None = None
    service_rate: float | None = None
    #: Share of the workers' capacity busy, 0..1.
    busy: float | None = None
    #: The group needs more workers than the caps let it have.
    saturated: bool = False


class GroupReport(_Model):
    """One worker group."""

    state: GroupState
    #: The request queue as the queue loop last saw it (None: absent).
    queue: GroupStatus | None = None
    #: The driver listed the group on the group loop's last pass.
    running: bool = False
    #: The last failure of the queue loop or of a driver call for this key.
    error: str | None = None
    #: Epoch seconds of the last valid activity report of one of its workers.
    last_activity: float | None = None
    #: Epoch seconds the group entered its state (None: not since this controller started).
    since: float | None = None
    #: Seconds from its group being required to its first worker's `ready`, last time.
    cold_start: float | None = None
    #: The group's workers, from drivers that describe them (None: the driver cannot).
    workers: list[WorkerInfo] | None = None
    #: Sum of the workers' restarts (None with `workers`).
    restarts: int | None = None
    # The request queue as the management API counts it (refreshed every few seconds);
    # None when unknown (no queue, or the management API did not answer).
    messages: int | None = None
    messages_ready: int | None = None
    messages_unacknowledged: int | None = None
    consumers: int | None = None
    #: Seconds since the oldest waiting request was published (classic queues only).
    oldest_message_age: float | None = None
    #: None when the queue's figures are unknown (`failing` whatever they are).
    health: Health | None = None
    #: Its workers keep failing to start: why (the last reason a worker reported, or its
    #: exit status), since when (epoch seconds), and the failed starts counted since then.
    failing_reason: str | None = None
    failing_since: float | None = None
    failed_starts: int | None = None
    #: The group scaler's view of the group (None: no scaler, or not decided yet).
    scaling: ScalingReport | None = None


class BrokerReport(_Model):
    """The broker's limits and their use, as last read from the management API (the most
    constrained running node's figures; None where the broker does not say)."""

    node: str | None = None
    fd_used: int | None = None
    fd_total: int | None = None
    proc_used: int | None = None
    proc_total: int | None = None
    mem_used: int | None = None
    mem_limit: int | None = None
    mem_alarm: bool = False
    disk_free: int | None = None
    disk_free_limit: int | None = None
    disk_alarm: bool = False
    #: Queues of the whole broker.
    queues: int | None = None
    #: Epoch seconds of the reading (None: never read).
    read_at: float | None = None
    #: Why the last reading failed (the figures are then those of the one before).
    error: str | None = None


class NodeReport(_Model):
    """One broker node: its health (from the limits reading) and this pool's share of it
    (from the request-queue loop's last listing)."""

    name: str
    running: bool
    #: Nodes it cannot reach (a partition as it sees it); empty when none.
    partitions: list[str] = pydantic.Field(default_factory=list)
    mem_alarm: bool = False
    disk_alarm: bool = False
    #: Connections of the pool's controller and workers on it (None: not read).
    pool_connections: int | None = None
    #: The pool's request queues led from it (quorum leader, or a classic queue's node).
    queue_leaders: int = 0
    #: The pool's quorum request queues with a member on it that is not online.
    members_missing: int = 0


class AdmissionReport(_Model):
    """What new keys are admitted against: the caps, what uses them, and the answer a new key
    would get now."""

    #: Groups counted against the caps (expected ones, and those still being stopped).
    groups: int
    #: `groups.max_groups` (None: no cap).
    max_groups: int | None = None
    #: Most groups the driver can run (None: it sets no limit).
    driver_capacity: int | None = None
    #: Standby workers the driver keeps running, not yet keyed (they count against its
    #: capacity); None: a driver without standby workers.
    standby: int | None = None
    #: New request queues the broker can still take before its headroom, estimated from the
    #: last reading and the groups admitted since (None: unknown).
    broker_room: int | None = None
    #: Groups admitted since the broker's limits were last read.
    admitted_since_read: int = 0
    #: The reason a new key is refused now (`max_groups`, `broker_fd`, ...); None: admitted.
    refusing: str | None = None
    #: New keys answered `overloaded` since the controller started, by reason.
    refused: dict[str, int] = pydantic.Field(default_factory=dict)


class StatusDocument(_Model):
    """Everything `/status` answers."""

    pool: str
    instance: str
    role: Role
    sessions: int
    last_error: str | None = None
    #: The broker node this controller's session is connected to (`host:port`), None
    #: between sessions; on a cluster it changes when that node is lost.
    broker_node: str | None = None
    driver: str
    #: The controller's clock (epoch seconds) when the document was made.
    time: float
    #: Leader only (None on a standby or while connecting).
    generations: Generations | None = None
    #: Standby only: who leads, when the broker says (None otherwise).
    leader: Leader | None = None
    groups: dict[str, GroupReport] = pydantic.Field(default_factory=dict)
    #: The keys of `groups`, in the order asked for (a JSON reader may not keep the order of
    #: an object's names: browsers put integer-like ones first).
    page: list[str] = pydantic.Field(default_factory=list)
    #: Groups by state, all of them (whatever page `groups` is).
    group_counts: dict[str, int] = pydantic.Field(default_factory=dict)
    #: Groups matching the request's filters (`groups` holds a page of them).
    groups_matching: int = 0
    #: Groups whose health is `stalled`, all of them (whatever page `groups` is).
    groups_stalled: int = 0
    #: Groups whose health is `failing`, all of them (whatever page `groups` is).
    groups_failing: int = 0
    #: Why the queue figures are missing (a standby, or before the first listing).
    queues_error: str | None = None
    #: Epoch seconds of the listing the queue figures come from (the request-queue loop's
    #: last pass over the broker's queues; no request to `/status` asks the broker).
    queues_read_at: float | None = None
    #: Leader only: the broker's limits and their use.
    broker: BrokerReport | None = None
    #: Leader only: every broker node, its health and the pool's share of it.
    broker_nodes: list[NodeReport] = pydantic.Field(default_factory=list)
    #: Leader only: the caps on new keys and their use.
    admission: AdmissionReport | None = None
    #: Leader only, a driver that keeps standby workers: those not yet keyed.
    standby_workers: list[WorkerInfo] | None = None


class GroupSort(enum.StrEnum):
    """Orders of the group list, each in its natural direction (`descending` reverses it);
    groups without the value come last either way, ties go by key (A to Z either way)."""

    KEY = "key"
    STATE = "state"
    #: Most recent state change first.
    SINCE = "since"
    #: Most workers first.
    WORKERS = "workers"
    #: Most restarts first.
    RESTARTS = "restarts"
    #: Most waiting requests first.
    MESSAGES = "messages"
    #: Most requests ready for a worker first.
    READY = "ready"
    #: Most requests delivered and not yet answered first.
    UNACKED = "unacked"
    #: Most consumers first.
    CONSUMERS = "consumers"
    #: Most recently active first.
    ACTIVITY = "activity"
    #: Slowest last cold start first.
    COLD_START = "cold_start"
    #: Groups with an error first, by error.
    ERROR = "error"


#: The orders whose natural direction is the largest value first.
_LARGEST_FIRST = frozenset(GroupSort) - {GroupSort.KEY, GroupSort.STATE, GroupSort.ERROR}

#: A group's value for a sort, None when it has none (it then comes last).
SortValue = float | str | None

_first = operator.itemgetter(0)


class GroupQuery(_Model):
    """Which groups a status request wants: a page of those matching, in an order."""

    #: Most groups returned (None: every one).
    limit: int | None = pydantic.Field(default=None, ge=0, le=100_000)
    offset: int = pydantic.Field(default=0, ge=0)
    #: Only keys containing this text, whatever its case (the whole key with `exact`).
    key: str | None = pydantic.Field(default=None, max_length=1024)
    #: `key` is a whole key, case included: at most one group matches.
    exact: bool = False
    state: GroupState | None = None
    #: Only groups of this health (`stalled`: work delivered, no worker report since).
    health: Health | None = None
    sort: GroupSort = GroupSort.KEY
    #: The other way round from the sort's natural direction.
    descending: bool = False

    def select(
        self,
        states: Mapping[str, GroupState],
        *,
        value: Callable[[GroupSort, str], SortValue],
        health: Callable[[str], Health | None],
    ) -> tuple[list[str], int]:
        """The keys of the page asked for, in order, and how many groups matched. Works on keys
        and cheap lookups only (`value`, `health`), so that a page of 100 out of 10,000 groups
        costs the filtering and sorting of keys, and the reports of 100 groups."""
        needle = self.key if self.exact or self.key is None else self.key.casefold()
        matching = [
            key
            for key, state in states.items()
            if (needle is None or (key == needle if self.exact else needle in key.casefold()))
            and (self.state is None or state is self.state)
            and (self.health is None or health(key) is self.health)
        ]
        matching.sort(reverse=self.descending and self.sort is GroupSort.KEY)
        if self.sort is not GroupSort.KEY:
            # In key order now; a stable sort on the value alone keeps ties in key order,
            # whichever way the values go.
            pairs = [(value(self.sort, key), key) for key in matching]
            valued = [(v, key) for v, key in pairs if v is not None]
            valued.sort(key=_first, reverse=(self.sort in _LARGEST_FIRST) != self.descending)
            matching = [key for _, key in valued] + [key for v, key in pairs if v is None]
        end = None if self.limit is None else self.offset + self.limit
        return matching[self.offset : end], len(matching)
