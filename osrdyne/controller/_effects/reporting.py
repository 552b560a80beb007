"""The status document of a controller (`/status`, `osrdyne status`, the console), built
from memory: this controller's view, the session's components, and the queue figures of the
request-queue loop's last listing. Only a standby asks the broker something: who leads.
The controller hands each report a snapshot of its state (`snapshot`): the reporter reads
nothing else of it."""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from drivers.base import Describes, Driver, Standby, WorkerInfo
from osrdyne.controller._decisions.broker_figures import BrokerFigures
from osrdyne.controller._decisions.history import KeyHistory
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._decisions.status import (
    Generations,
    GroupQuery,
    GroupReport,
    GroupSort,
    GroupState,
    Health,
    Leader,
    NodeReport,
    Role,
    SortValue,
    StatusDocument,
)
from osrdyne.controller._effects import topology
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.snapshot import ControllerSnapshot, SessionSnapshot
from osrdyne.controller._settings import Settings
from osrdyne.ops import logs
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)
#: The state `/status` shows for each expected status (a lookup: it runs for every group).
_STATE_OF = {status: GroupState(status.value) for status in GroupStatus}


class StatusReporter:
    """Builds the status document of a controller from the snapshots it hands over."""

    def __init__(
        self,
        *,
        settings: Settings,
        instance: str,
        names: PoolNames,
        api: ManagementApi,
        driver: Driver,
        history: KeyHistory,
        find_leader: Callable[[], Awaitable[Leader | None]],
    ) -> None:
        self._settings = settings
        self._instance = instance
        self._names = names
        self._api = api
        self._driver = driver
        self._history = history
        self._find_leader = find_leader

    async def report(
        self, snapshot: ControllerSnapshot, query: GroupQuery | None = None
    ) -> StatusDocument:
        """The status document, from memory: this controller's view and the queue figures of
        the request-queue loop's last listing (their time in `queues_read_at`). Only a
        standby asks the broker something: who leads. `query` picks a page of the groups:
        keys are filtered and sorted first, and only the page's groups are reported."""
        doc = self.summary(snapshot)
        if doc.role is Role.STANDBY:
            try:
                doc.leader = await self._find_leader()
            except Exception as exc:  # status must answer even when the broker does not
                logger.debug("cannot tell who leads: %s", logs.redact(str(exc)))
        session = snapshot.session
        listing = session.listing if session is not None else None
        if listing is None:
            doc.queues_error = (
                "no listing of the request queues yet"
                if session is not None
                else "queue figures are read by the leader's control loop"
            )
        else:
            doc.queues_read_at = listing.read_at
        if session is None:
            return doc
        doc.broker_nodes = node_reports(session.broker_figures, listing)
        states = self._group_states(session)
        counts = collections.Counter(state.value for state in states.values())
        doc.group_counts = dict(sorted(counts.items()))
        figures = listing.figures if listing is not None else {}
        workers = self._describe_workers()
        now = time.time()
        value, health = self._group_facts(session, states, figures, workers, now)
        doc.groups_stalled = sum(1 for key in states if health(key) is Health.STALLED)
        doc.groups_failing = len(session.failing)
        page, doc.groups_matching = (query or GroupQuery()).select(
            states, value=value, health=health
        )
        doc.page = page
        for key in page:
            group = self._group_report(session, key, states[key], workers)
            queue = figures.get(key)
            if queue is not None:
                group.messages = int(queue.get("messages") or 0)
                group.messages_ready = int(queue.get("messages_ready") or 0)
                group.messages_unacknowledged = int(queue.get("messages_unacknowledged") or 0)
                group.consumers = int(queue.get("consumers") or 0)
                # Only classic queues report their head message's timestamp (seconds); quorum
                # queues (RabbitMQ 3.10) do not, so the age is unknown: None.
                head = queue.get("head_message_timestamp")
                if isinstance(head, int | float):
                    group.oldest_message_age = max(0.0, now - head)
                group.health = health(key)
            doc.groups[key] = group
        return doc

    def _group_facts(
        self,
        session: SessionSnapshot,
        states: Mapping[str, GroupState],
        figures: Mapping[str, Mapping[str, Any]],
        workers: Mapping[str, Any] | None,
        now: float,
    ) -> tuple[Callable[[GroupSort, str], SortValue], Callable[[str], Health | None]]:
        """A group's value for each sort, and its health, from lookups alone (no report
        built): what `/status` filters and sorts every group on before it builds a page."""
        reached, group_errors = session.queues, session.group_errors
        last_seen, failing, history = session.last_seen, session.failing, self._history

        def figure(key: str, name: str) -> int | None:
            queue = figures.get(key)
            return None if queue is None else int(queue.get(name) or 0)

        def restarts(key: str) -> int | None:
            return None if workers is None else sum(w.restarts for w in workers.get(key, ()))

        values: dict[GroupSort, Callable[[str], SortValue]] = {
            GroupSort.KEY: lambda key: key,
            GroupSort.STATE: lambda key: states[key].value,
            GroupSort.SINCE: history.since,
            GroupSort.WORKERS: lambda key: None if workers is None else len(workers.get(key, ())),
            GroupSort.RESTARTS: restarts,
            GroupSort.MESSAGES: lambda key: figure(key, "messages"),
            GroupSort.READY: lambda key: figure(key, "messages_ready"),
            GroupSort.UNACKED: lambda key: figure(key, "messages_unacknowledged"),
            GroupSort.CONSUMERS: lambda key: figure(key, "consumers"),
            GroupSort.ACTIVITY: last_seen.get,
            GroupSort.COLD_START: history.cold_start,
            GroupSort.ERROR: lambda key: reached.errors.get(key) or group_errors.get(key),
        }

        def value(sort: GroupSort, key: str) -> SortValue:
            return values[sort](key)

        def health(key: str) -> Health | None:
            """Stalled: work delivered and unanswered, and no worker report for
            `stall_after` (workers report while they work; a wedged one stops, and its own
            activity never keeps it looking alive); None when the queue's figures are
            unknown. Failing: its workers keep failing to start (whatever the figures)."""
            if key in failing:
                return Health.FAILING
            unacked = figure(key, "messages_unacknowledged")
            if unacked is None:
                return None
            seen = last_seen.get(key)
            quiet = now - seen if seen is not None else float("inf")
            stalled = unacked and quiet > self._settings.groups.stall_after
            return Health.STALLED if stalled else Health.OK

        return value, health

    async def request_queues(self, *, columns: str) -> dict[str, dict[str, Any]]:
        """The pool's request queues as the management API reports them, by key."""
        queues = await self._api.queues(
            name_regex="^" + re.escape(self._names.request_queue_prefix),
            columns=f"{columns},arguments",  # hashed names are read back from their argument
        )
        by_key: dict[str, dict[str, Any]] = {}
        for queue in queues:
            key = self._names.key_of_queue(queue["name"], queue.get("arguments"))
            if key is not None:
                by_key[key] = queue
        return by_key

    def status(self, snapshot: ControllerSnapshot) -> StatusDocument:
        """What this controller knows, every group included, without asking the broker (no
        I/O; `report()` adds the queue figures and pages the groups)."""
        doc = self.summary(snapshot)
        session = snapshot.session
        if session is None:
            return doc
        workers = self._describe_workers()
        for key, state in self._group_states(session).items():
            doc.groups[key] = self._group_report(session, key, state, workers)
        return doc

    def summary(self, snapshot: ControllerSnapshot) -> StatusDocument:
        """The document without its groups."""
        doc = StatusDocument(
            pool=self._settings.pool,
            instance=self._instance,
            role=snapshot.role,
            sessions=snapshot.sessions,
            last_error=snapshot.last_error,
            broker_node=snapshot.broker_node,
            driver=self._settings.driver.kind,
            time=time.time(),
        )
        session = snapshot.session
        if session is None:
            return doc
        doc.generations = Generations(
            tracker=session.generation,
            queues=session.queues.generation,
            groups=session.groups_generation,
        )
        doc.broker = session.broker
        doc.admission = session.admission
        if isinstance(self._driver, Standby):
            doc.standby_workers = [worker_info(w) for w in self._driver.standby_workers()]
            doc.admission.standby = len(doc.standby_workers)
        return doc

    @staticmethod
    def _group_states(session: SessionSnapshot) -> dict[str, GroupState]:
        """Every group the controller knows of (wanted, with a queue, or running), sorted by
        key, and its state (one no longer wanted is stopping)."""
        expected = session.expected
        actual = session.queues.actual
        keys = set(expected) | set(actual) | session.running
        return {
            key: _STATE_OF[expected[key]] if key in expected else GroupState.STOPPING
            for key in sorted(keys)
        }

    def _group_report(
        self,
        session: SessionSnapshot,
        key: str,
        state: GroupState,
        workers: Mapping[str, Any] | None,
    ) -> GroupReport:
        reached = session.queues
        group = GroupReport(
            state=state,
            queue=reached.actual.get(key),
            running=key in session.running,
            error=reached.errors.get(key) or session.group_errors.get(key),
            last_activity=session.last_seen.get(key),
            since=self._history.since(key),
            cold_start=self._history.cold_start(key),
            scaling=session.scaling(key) if session.scaling is not None else None,
        )
        if workers is not None:
            group.workers = list(workers.get(key, ()))
            group.restarts = sum(w.restarts for w in group.workers)
        failing = session.failing.get(key)
        if failing is not None:
            group.health = Health.FAILING
            group.failing_reason = failing.reason
            group.failing_since = failing.since
            group.failed_starts = failing.failed_starts
        return group

    def _describe_workers(self) -> Mapping[str, Any] | None:
        """Per-worker details from drivers that can give them (`Describes`), else None."""
        if not isinstance(self._driver, Describes):
            return None
        try:
            described: Mapping[str, Any] = self._driver.describe()
        except Exception:  # status must answer even when a driver cannot describe itself
            logger.exception("driver describe() failed")
            return None
        return {key: [worker_info(w) for w in infos] for key, infos in described.items()}


def node_reports(
    figures: BrokerFigures | None, listing: topology.RequestQueues | None
) -> list[NodeReport]:
    """Each broker node from the last limits reading, with the pool's request queues led
    from it and those missing a member there (from the queue loop's last listing)."""
    reports = {
        n.name: NodeReport(
            name=n.name,
            running=n.running,
            partitions=list(n.partitions),
            mem_alarm=n.mem_alarm,
            disk_alarm=n.disk_alarm,
            pool_connections=n.pool_connections,
        )
        for n in (figures.nodes if figures is not None else ())
    }
    leaders, missing = listing.placement() if listing is not None else ({}, {})
    for node, count in leaders.items():
        reports.setdefault(node, NodeReport(name=node, running=False)).queue_leaders = count
    for node, count in missing.items():
        reports.setdefault(node, NodeReport(name=node, running=False)).members_missing = count
    return sorted(reports.values(), key=lambda r: r.name)


def worker_info(info: Any) -> WorkerInfo:
    """A worker of a driver's description, as `/status` shows it."""
    return info if isinstance(info, WorkerInfo) else WorkerInfo(**info)
