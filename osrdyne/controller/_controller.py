"""The controller of one pool: wires the components and keeps them running.

A controller lives through *sessions*. A session connects to the broker, declares the pool's
topology, applies the request-queue policy, and waits for _leadership. As leader it rebuilds
the expected state from the queues that exist (a restart adopts what it finds), then runs the
tracker, both control loops and the three consumers until the connection is lost, a component
dies, or the controller is asked to stop. A lost session is followed by a new one after a
back-off; the driver (and the workers it runs) outlives sessions.

Stopping is staged: stop taking orphans and dead letters, give in-flight ones a grace period,
cancel the loops, close the connection, then close the driver (the subprocess driver stops
its workers there).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import aio_pika
import aio_pika.abc
import httpx

from drivers import registry
from drivers.base import Describes, Driver, PoolContext, Standby, WorkerInfo
from osrdyne import wire
from osrdyne.controller import _aiotasks, _leadership, _session, _topology
from osrdyne.controller._history import KeyHistory
from osrdyne.controller._management import ManagementApi
from osrdyne.controller._session import Session
from osrdyne.controller._settings import Settings
from osrdyne.controller._status import (
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
from osrdyne.controller._tracker import GroupStatus
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics, FastPathEstimate
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)
#: The state `/status` shows for each expected status (a lookup: it runs for every group).
_STATE_OF = {status: GroupState(status.value) for status in GroupStatus}


class NotLeader(RuntimeError):
    """An operator's action reached a controller that does not lead its pool."""

    def __init__(self, role: Role) -> None:
        super().__init__(f"this controller does not lead its pool (it is {role.value})")
        self.role = role


class ComponentDied(RuntimeError):
    """A background component of the session ended: the session restarts from scratch."""


#: Connection failures that end a session and are followed by a new one.
SESSION_ERRORS = (
    aio_pika.exceptions.AMQPError,
    ConnectionError,
    OSError,
    httpx.TransportError,
    httpx.HTTPStatusError,
    asyncio.TimeoutError,
    ComponentDied,
)


class Controller:
    def __init__(self, settings: Settings, *, driver: Driver | None = None) -> None:
        self.settings = settings
        self.names = PoolNames(settings.pool)
        self.driver = driver if driver is not None else _make_driver(settings)
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.metrics = ControllerMetrics()
        self.role = Role.CONNECTING
        #: The components of the session this controller leads, None when it does not lead.
        self.session: _session.Session | None = None
        self.api = ManagementApi(
            settings.amqp.management_url,
            vhost=settings.amqp.vhost,
            credentials=settings.amqp.credentials,
            retry_for=settings.amqp.management_retry,
        )
        self.sessions = 0
        self.last_error: str | None = None
        #: What happened to each key lately (the console's timelines); outlives sessions.
        self.history = KeyHistory()
        #: What the broker-node gauges were last set from (listing, limits reading).
        self._nodes_gauged: tuple[int, float] | None = None
        #: Base URL of this controller's HTTP API, shown to other controllers of the pool.
        self.api_url: str | None = None
        #: `host:port` of the broker node the session is on (None between sessions).
        self.broker_node: str | None = None
        #: Which of the broker addresses the next session tries first.
        self._first_node = 0
        self._stopping = asyncio.Event()
        self._became_leader = asyncio.Event()

    # -- public ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the controller to stop (safe from a signal handler)."""
        self._stopping.set()

    async def wait_leader(self) -> None:
        """Wait until this controller leads its pool (tests, health checks)."""
        await self._became_leader.wait()

    def leading(self) -> _session.Session:
        """The session through which an operator acts; `NotLeader` when it does not lead."""
        session = self.session
        if session is None:
            raise NotLeader(self.role)
        return session

    async def find_leader(self) -> Leader | None:
        """Who leads the pool, as the broker says (None: unknown yet, or nobody)."""
        async with asyncio.timeout(_FIGURES_TIMEOUT):
            return await _leadership.find_leader(self.api, self.names)

    async def run(self) -> None:
        """Run sessions until `stop()`; then close the driver."""
        failures = 0
        try:
            while not self._stopping.is_set():
                self.sessions += 1
                try:
                    await self._bounded_session()
                    failures = 0
                except SESSION_ERRORS as exc:
                    failures += 1
                    # The next session starts at the next address: a node that accepts
                    # connections but cannot serve (partitioned, booting) is not retried first.
                    self._first_node += 1
                    self.last_error = logs.redact(f"{type(exc).__name__}: {exc}")
                    logger.warning(
                        "session %d of pool %r ended: %s",
                        self.sessions,
                        self.settings.pool,
                        self.last_error,
                    )
                self._set_role(Role.CONNECTING)
                if not self._stopping.is_set():
                    # Back off between failed sessions; a good session resets the delay.
                    delay = min(10.0, 0.5 * 2 ** min(failures, 5)) if failures else 0.5
                    await _sleep_unless(self._stopping, delay)
        finally:
            await self.driver.close()
            await self.api.close()

    async def _bounded_session(self) -> None:
        """One session, ended within `amqp.stop_grace` of `stop()` whatever stage it is in.

        The session sees the stop itself and stops in stages; when it has not ended after the
        grace (it waits on a broker that stopped answering), it is cancelled."""
        session = asyncio.create_task(
            self._session(), name=f"session {self.sessions} of pool {self.settings.pool}"
        )
        stopping = asyncio.create_task(self._stopping.wait(), name="stop request")
        try:
            await asyncio.wait({session, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not session.done():
                await asyncio.wait({session}, timeout=self.settings.amqp.stop_grace)
            if not session.done():
                logger.warning(
                    "session of pool %r still waiting on the broker %.0fs after the stop: "
                    "abandoned",
                    self.settings.pool,
                    self.settings.amqp.stop_grace,
                )
        finally:
            stopping.cancel()
            await _cancel(session)
        if not session.cancelled():
            session.result()  # the session's own failure, if any

    # -- one session ----------------------------------------------------------------------

    async def _session(self) -> None:
        s = self.settings
        first = self._first_node % len(s.amqp.url)
        async with asyncio.timeout(s.amqp.startup_timeout):
            connection = await wire.connect(
                s.amqp.url[first:] + s.amqp.url[:first],
                name=_leadership.connection_name(s.pool, self.instance, self.api_url),
                timeout=s.amqp.connect_timeout,
                shuffle=s.amqp.shuffle,
                heartbeat=s.amqp.heartbeat,
            )
        url = getattr(connection, "url", None)  # aio_pika.Connection's, not in its ABC
        self.broker_node = f"{url.host}:{url.port}" if url is not None else None
        lost = asyncio.Event()
        connection.close_callbacks.add(lambda *_: lost.set())
        try:
            # Every start-up step is bounded: a broker that stopped answering ends the session
            # (on a node cut off from its cluster a quorum queue's declare waits for a leader
            # that cannot be elected), and the next session tries the next address.
            async with asyncio.timeout(min(s.amqp.operation_timeout, s.amqp.startup_timeout)):
                await _topology.declare_pool(
                    connection, self.names, replicated=bool(s.queues.replicate_pool_queues)
                )
            async with asyncio.timeout(s.amqp.startup_timeout):
                await _topology.apply_policy(self.api, self.names, s.queues)
            self._set_role(Role.STANDBY)
            acquiring = asyncio.create_task(_leadership.acquire(connection, self.names))
            if not await _first(acquiring, self._stopping, lost):
                return
            self._set_role(Role.LEADER)
            await self._lead(connection, lost)
        finally:
            # The broker dropped us if the connection closed before we closed it; said only
            # when nothing else ended the session (else that is the cause to report).
            dropped = lost.is_set()
            self.broker_node = None
            await _close(connection, timeout=min(5.0, s.amqp.stop_grace / 4))
        if dropped and not self._stopping.is_set():
            raise ConnectionError("connection to the broker lost")

    async def _lead(self, connection: aio_pika.abc.AbstractConnection, lost: asyncio.Event) -> None:
        s = self.settings
        async with asyncio.timeout(s.amqp.startup_timeout):
            session = await _session.build(
                connection,
                settings=s,
                names=self.names,
                api=self.api,
                driver=self.driver,
                metrics=self.metrics,
                history=self.history,
            )
            # The broker's limits are known before the first new key is admitted.
            await session.broker_limits.read()
            # The fast-path estimate counts from here: read the exchange before taking work.
            fast_path = FastPathEstimate(self.metrics)
            await self._read_exchange_stats(fast_path)
        died = asyncio.Event()
        tasks = [
            _aiotasks.guarded(session.tracker.run(), name="pool state tracker", on_death=died),
            _aiotasks.guarded(
                session.queue_loop.run(session.adopted), name="request-queue loop", on_death=died
            ),
            _aiotasks.guarded(session.group_loop.run(), name="worker-group loop", on_death=died),
            _aiotasks.guarded(self._watch_gauges(fast_path), name="gauges", on_death=died),
            _aiotasks.guarded(session.broker_limits.run(), name="broker limits", on_death=died),
        ]
        self.session = session
        if isinstance(self.driver, Standby):
            self.driver.attach(session.assign)
        try:
            # Dead letters and activity first: orphans (which start groups) are taken only
            # once the controller can answer their dead letters and hear from their workers.
            async with asyncio.timeout(s.amqp.startup_timeout):
                for consumer in session.consumers:
                    await consumer.start()
                await session.events.start()
            self._became_leader.set()
            await _first(self._stopping, lost, died)
            if died.is_set() and not self._stopping.is_set():
                raise ComponentDied("a controller component died; starting a new session")
        finally:
            # Within the stop grace: a quarter for in-flight messages (each consumer's stop
            # takes at most three times that: the cancel, the messages, the publishes that
            # must reach their ack), the loops cancelled at once, then the connection's
            # close (`_session`). The loops are cancelled even if this is interrupted.
            grace = s.amqp.stop_grace / 4 if self._stopping.is_set() else 0.5
            try:
                await asyncio.gather(*(c.stop(grace) for c in session.consumers))
            finally:
                self._became_leader.clear()
                self.session = None
                if isinstance(self.driver, Standby):
                    self.driver.attach(None)
                await _aiotasks.stop_all(tasks)

    async def _watch_gauges(self, fast_path: FastPathEstimate) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(1.0)
            ticks += 1
            if ticks % 5 == 0:  # the broker refreshes its statistics every 5 s by default
                await self._read_exchange_stats(fast_path)
            session = self.session
            if session is None:
                continue
            tracker = session.tracker
            counts = collections.Counter(tracker.state.value.groups.values())
            for state in GroupStatus:
                self.metrics.groups.labels(state.value).set(counts[state])
            generation = tracker.generation
            self.metrics.generation_lag.labels("queues").set(
                generation - session.queue_loop.reached.value.generation
            )
            self.metrics.generation_lag.labels("groups").set(
                generation - session.group_loop.reached.value
            )
            self._limit_gauges(session)
            if isinstance(self.driver, Standby):
                self.metrics.standby_workers.set(len(self.driver.standby_workers()))

    def _limit_gauges(self, session: Session) -> None:
        """The caps on new keys and the broker's limits, as gauges."""
        admission = session.admission.report()
        m = self.metrics
        for name, value in (
            ("max_groups", admission.max_groups),
            ("driver_capacity", admission.driver_capacity),
            ("broker_room", admission.broker_room),
        ):
            if value is not None:
                m.admission_limit.labels(name).set(value)
        figures = session.broker_limits.figures
        if figures is None:
            return
        for resource, used, limit in (
            ("fd", figures.fd_used, figures.fd_total),
            ("processes", figures.proc_used, figures.proc_total),
            ("memory", figures.mem_used, figures.mem_limit),
            ("queues", figures.queues, None),
        ):
            if used is not None:
                m.broker_used.labels(resource).set(used)
            if limit is not None:
                m.broker_limit.labels(resource).set(limit)
        m.broker_alarm.labels("memory").set(1 if figures.mem_alarm else 0)
        m.broker_alarm.labels("disk").set(1 if figures.disk_alarm else 0)
        listing = session.queue_loop.listing
        reading = (id(listing), figures.time)
        if reading == self._nodes_gauged:
            return  # nothing new since the last pass (the listing can hold 10,000 queues)
        self._nodes_gauged = reading
        for node in _node_reports(session, listing):
            for figure, value in (
                ("running", int(node.running)),
                ("partitions", len(node.partitions)),
                ("pool_connections", node.pool_connections),
                ("queue_leaders", node.queue_leaders),
                ("members_missing", node.members_missing),
            ):
                if value is not None:
                    m.broker_node.labels(node.name, figure).set(value)

    async def _read_exchange_stats(self, fast_path: FastPathEstimate) -> None:
        try:
            # Bounded: the management API retries for longer, and leading must not wait on it.
            async with asyncio.timeout(10):
                exchange = await self.api.exchange(self.names.request_exchange)
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            logger.debug("cannot read the request exchange's statistics: %s", exc)
            return
        if exchange is None:
            return
        # No `message_stats` yet: nothing was ever published to the exchange.
        published = (exchange.get("message_stats") or {}).get("publish_in", 0)
        if isinstance(published, int | float):
            fast_path.observe(float(published))

    def _set_role(self, role: Role) -> None:
        if role != self.role:
            logger.info("controller of pool %r: %s", self.settings.pool, role.value)
        self.role = role
        self.metrics.leader.set(1 if role is Role.LEADER else 0)

    # -- status ---------------------------------------------------------------------------

    async def report(self, query: GroupQuery | None = None) -> StatusDocument:
        """The status document, from memory: this controller's view and the queue figures of
        the request-queue loop's last listing (their time in `queues_read_at`). Only a
        standby asks the broker something: who leads. `query` picks a page of the groups:
        keys are filtered and sorted first, and only the page's groups are reported."""
        doc = self._summary()
        if doc.role is Role.STANDBY:
            try:
                doc.leader = await self.find_leader()
            except Exception as exc:  # status must answer even when the broker does not
                logger.debug("cannot tell who leads: %s", logs.redact(str(exc)))
        session = self.session
        listing = session.queue_loop.listing if session is not None else None
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
        doc.broker_nodes = _node_reports(session, listing)
        states = self._group_states(session)
        counts = collections.Counter(state.value for state in states.values())
        doc.group_counts = dict(sorted(counts.items()))
        figures = listing.figures if listing is not None else {}
        workers = self._describe_workers()
        now = time.time()
        value, health = self._group_facts(session, states, figures, workers, now)
        doc.groups_stalled = sum(1 for key in states if health(key) is Health.STALLED)
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
        session: Session,
        states: Mapping[str, GroupState],
        figures: Mapping[str, Mapping[str, Any]],
        workers: Mapping[str, Any] | None,
        now: float,
    ) -> tuple[Callable[[GroupSort, str], SortValue], Callable[[str], Health | None]]:
        """A group's value for each sort, and its health, from lookups alone (no report
        built): what `/status` filters and sorts every group on before it builds a page."""
        reached, group_loop = session.queue_loop.reached.value, session.group_loop
        last_seen = session.activity.last_seen

        def figure(key: str, name: str) -> int | None:
            queue = figures.get(key)
            return None if queue is None else int(queue.get(name) or 0)

        def restarts(key: str) -> int | None:
            return None if workers is None else sum(w.restarts for w in workers.get(key, ()))

        values: dict[GroupSort, Callable[[str], SortValue]] = {
            GroupSort.KEY: lambda key: key,
            GroupSort.STATE: lambda key: states[key].value,
            GroupSort.SINCE: self.history.since,
            GroupSort.WORKERS: lambda key: None if workers is None else len(workers.get(key, ())),
            GroupSort.RESTARTS: restarts,
            GroupSort.MESSAGES: lambda key: figure(key, "messages"),
            GroupSort.READY: lambda key: figure(key, "messages_ready"),
            GroupSort.UNACKED: lambda key: figure(key, "messages_unacknowledged"),
            GroupSort.CONSUMERS: lambda key: figure(key, "consumers"),
            GroupSort.ACTIVITY: last_seen.get,
            GroupSort.COLD_START: self.history.cold_start,
            GroupSort.ERROR: lambda key: reached.errors.get(key) or group_loop.errors.get(key),
        }

        def value(sort: GroupSort, key: str) -> SortValue:
            return values[sort](key)

        def health(key: str) -> Health | None:
            """Stalled: work delivered and unanswered, and no worker report for
            `stall_after` (workers report while they work; a wedged one stops, and its own
            activity never keeps it looking alive); None when the queue's figures are
            unknown."""
            unacked = figure(key, "messages_unacknowledged")
            if unacked is None:
                return None
            seen = last_seen.get(key)
            quiet = now - seen if seen is not None else float("inf")
            stalled = unacked and quiet > self.settings.groups.stall_after
            return Health.STALLED if stalled else Health.OK

        return value, health

    async def request_queues(self, *, columns: str) -> dict[str, dict[str, Any]]:
        """The pool's request queues as the management API reports them, by key."""
        queues = await self.api.queues(
            name_regex="^" + re.escape(self.names.request_queue_prefix),
            columns=f"{columns},arguments",  # hashed names are read back from their argument
        )
        by_key: dict[str, dict[str, Any]] = {}
        for queue in queues:
            key = self.names.key_of_queue(queue["name"], queue.get("arguments"))
            if key is not None:
                by_key[key] = queue
        return by_key

    def status(self) -> StatusDocument:
        """What this controller knows, every group included, without asking the broker (no
        I/O; `report()` adds the queue figures and pages the groups)."""
        doc = self._summary()
        session = self.session
        if session is None:
            return doc
        workers = self._describe_workers()
        for key, state in self._group_states(session).items():
            doc.groups[key] = self._group_report(session, key, state, workers)
        return doc

    def _summary(self) -> StatusDocument:
        """The document without its groups."""
        doc = StatusDocument(
            pool=self.settings.pool,
            instance=self.instance,
            role=self.role,
            sessions=self.sessions,
            last_error=self.last_error,
            broker_node=self.broker_node,
            driver=self.settings.driver.kind,
            time=time.time(),
        )
        session = self.session
        if session is None:
            return doc
        doc.generations = Generations(
            tracker=session.tracker.generation,
            queues=session.queue_loop.reached.value.generation,
            groups=session.group_loop.reached.value,
        )
        doc.broker = session.admission.broker_report()
        doc.admission = session.admission.report()
        if isinstance(self.driver, Standby):
            doc.standby_workers = [_worker(w) for w in self.driver.standby_workers()]
            doc.admission.standby = len(doc.standby_workers)
        return doc

    @staticmethod
    def _group_states(session: Session) -> dict[str, GroupState]:
        """Every group the controller knows of (wanted, with a queue, or running), sorted by
        key, and its state (one no longer wanted is stopping)."""
        expected = session.tracker.state.value.groups
        actual = session.queue_loop.reached.value.actual
        keys = set(expected) | set(actual) | session.group_loop.running
        return {
            key: _STATE_OF[expected[key]] if key in expected else GroupState.STOPPING
            for key in sorted(keys)
        }

    def _group_report(
        self,
        session: Session,
        key: str,
        state: GroupState,
        workers: Mapping[str, Any] | None,
    ) -> GroupReport:
        reached, group_loop = session.queue_loop.reached.value, session.group_loop
        group = GroupReport(
            state=state,
            queue=reached.actual.get(key),
            running=key in group_loop.running,
            error=reached.errors.get(key) or group_loop.errors.get(key),
            last_activity=session.activity.last_seen.get(key),
            since=self.history.since(key),
            cold_start=self.history.cold_start(key),
        )
        if workers is not None:
            group.workers = list(workers.get(key, ()))
            group.restarts = sum(w.restarts for w in group.workers)
        return group

    def _describe_workers(self) -> Mapping[str, Any] | None:
        """Per-worker details from drivers that can give them (`Describes`), else None."""
        if not isinstance(self.driver, Describes):
            return None
        try:
            described: Mapping[str, Any] = self.driver.describe()
        except Exception:  # status must answer even when a driver cannot describe itself
            logger.exception("driver describe() failed")
            return None
        return {key: [_worker(w) for w in infos] for key, infos in described.items()}


#: Longest wait for the management API when a standby's status asks who leads.
_FIGURES_TIMEOUT = 5.0


def _node_reports(session: Session, listing: _topology.RequestQueues | None) -> list[NodeReport]:
    """Each broker node from the last limits reading, with the pool's request queues led
    from it and those missing a member there (from the queue loop's last listing)."""
    figures = session.broker_limits.figures
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


def _worker(info: Any) -> WorkerInfo:
    return info if isinstance(info, WorkerInfo) else WorkerInfo(**info)


def _make_driver(settings: Settings) -> Driver:
    context = PoolContext(
        pool=settings.pool, amqp_uri=wire.join_urls(settings.amqp.worker_url or settings.amqp.url)
    )
    return registry.make_driver(settings.driver.kind, settings.driver.sections, context)


async def _cancel(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait for it to end; again if its clean-up waits on something that
    does not answer (each cancellation interrupts one await; clean-ups are bounded anyway)."""
    for _ in range(3):
        if task.done():
            return
        task.cancel()
        await asyncio.wait({task}, timeout=5.0)
    if not task.done():
        logger.error("%s did not end after 3 cancellations: left behind", task.get_name())


async def _close(connection: aio_pika.abc.AbstractConnection, *, timeout: float) -> None:
    """Close `connection` within `timeout`: a broker that stopped answering never says
    close-ok, and a session must not wait for it."""
    if connection.is_closed:
        return
    try:
        async with asyncio.timeout(timeout):
            await connection.close()
    except SESSION_ERRORS as exc:
        logger.warning("connection to the broker not closed cleanly: %r", exc)


async def _sleep_unless(event: asyncio.Event, delay: float) -> None:
    try:
        async with asyncio.timeout(delay):
            await event.wait()
    except TimeoutError:
        pass


async def _first(*waitables: asyncio.Task[Any] | asyncio.Event) -> bool:
    """Wait for the first of tasks/events; True when the first awaitable finished first."""
    tasks = [w if isinstance(w, asyncio.Task) else asyncio.create_task(w.wait()) for w in waitables]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    first = tasks[0]
    if first in done and not first.cancelled() and first.exception() is not None:
        raise first.exception()  # type: ignore[misc]
    return first in done
