"""The controller of one pool: wires the components and keeps them running.

A controller lives through *sessions*. A session connects to the broker, declares the pool's
topology, applies the request-queue policy, and waits for leadership. As leader it rebuilds
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
import logging
import os
import socket
from typing import Any

import aio_pika
import aio_pika.abc
import httpx

from drivers import registry
from drivers.base import Driver, PoolContext, Standby
from osrdyne import wire
from osrdyne.controller import _session
from osrdyne.controller._decisions.history import KeyHistory
from osrdyne.controller._decisions.status import (
    GroupQuery,
    Leader,
    Role,
    StatusDocument,
)
from osrdyne.controller._effects import aiotasks, gauges, leadership, reporting, topology
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.snapshot import ControllerSnapshot
from osrdyne.controller._settings import Settings
from osrdyne.exceptions import BrokerUnsuitable, OsrdyneError
from osrdyne.ops import logs
from osrdyne.ops.metrics import ControllerMetrics, FastPathEstimate
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)


class NotLeader(OsrdyneError, RuntimeError):
    """An operator's action reached a controller that does not lead its pool (a
    `RuntimeError` too, as it was before it joined the project's tree)."""

    def __init__(self, role: Role) -> None:
        super().__init__(f"this controller does not lead its pool (it is {role.value})")
        self.role = role


class ComponentDied(OsrdyneError, RuntimeError):
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
    BrokerUnsuitable,
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
        #: Base URL of this controller's HTTP API, shown to other controllers of the pool.
        self.api_url: str | None = None
        #: `host:port` of the broker node the session is on (None between sessions).
        self.broker_node: str | None = None
        #: Which of the broker addresses the next session tries first.
        self._first_node = 0
        self._stopping = asyncio.Event()
        self._became_leader = asyncio.Event()
        self._reporter = reporting.StatusReporter(
            settings=settings,
            instance=self.instance,
            names=self.names,
            api=self.api,
            driver=self.driver,
            history=self.history,
            find_leader=self.find_leader,
        )
        self._gauges = gauges.Gauges(
            metrics=self.metrics, driver=self.driver, api=self.api, names=self.names
        )

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

    async def report(self, query: GroupQuery | None = None) -> StatusDocument:
        """The status document, from memory, a page of its groups (`reporting`)."""
        return await self._reporter.report(self.snapshot(), query)

    def status(self) -> StatusDocument:
        """What this controller knows, every group included, without I/O (`reporting`)."""
        return self._reporter.status(self.snapshot())

    def snapshot(self) -> ControllerSnapshot:
        """This controller's state now, and its session's figures while it leads: what its
        status document and gauges read."""
        session = self.session
        return ControllerSnapshot(
            role=self.role,
            sessions=self.sessions,
            last_error=self.last_error,
            broker_node=self.broker_node,
            session=session.snapshot() if session is not None else None,
        )

    async def request_queues(self, *, columns: str) -> dict[str, dict[str, Any]]:
        """The pool's request queues as the management API reports them, by key."""
        return await self._reporter.request_queues(columns=columns)

    async def find_leader(self) -> Leader | None:
        """Who leads the pool, as the broker says (None: unknown yet, or nobody)."""
        async with asyncio.timeout(_FIGURES_TIMEOUT):
            return await leadership.find_leader(self.api, self.names)

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
                if self._stopping.is_set():
                    break
                self._set_role(Role.CONNECTING)
                # Back off between failed sessions; a good session resets the delay.
                delay = min(10.0, 0.5 * 2 ** min(failures, 5)) if failures else 0.5
                await _sleep_unless(self._stopping, delay)
        finally:
            # No session any more: the role is `connecting` again, as between sessions, but the
            # line logged says what the controller does: it stops.
            self.role = Role.CONNECTING
            self.metrics.leader.set(0)
            logger.info(
                "controller of pool %r: stopped after %d sessions; closing its driver and API",
                self.settings.pool,
                self.sessions,
            )
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
                name=leadership.connection_name(s.pool, self.instance, self.api_url),
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
            async with asyncio.timeout(s.amqp.startup_timeout):
                # Before anything is declared: a broker that cannot serve the pool gets none of
                # it (a client is told PoolNotFound at once, rather than waiting unanswered).
                version = await topology.check_broker(self.api)
            async with asyncio.timeout(min(s.amqp.operation_timeout, s.amqp.startup_timeout)):
                await topology.declare_pool(
                    connection, self.names, replicated=bool(s.queues.replicate_pool_queues)
                )
            async with asyncio.timeout(s.amqp.startup_timeout):
                await topology.apply_policy(self.api, self.names, s.queues, broker_version=version)
            self._set_role(Role.STANDBY)
            acquiring = asyncio.create_task(leadership.acquire(connection, self.names))
            if not await _first(acquiring, self._stopping, lost):
                return
            channel, contended = acquiring.result()
            lease = _lease_seconds(url, s.amqp.heartbeat)
            if contended and lease:
                # The leader before us may still act until its lease runs out (fencing).
                logger.info(
                    "pool %r: waiting out the previous leader's lease (%.0f s) before acting",
                    s.pool,
                    lease,
                )
                waited = asyncio.create_task(asyncio.sleep(lease))
                if not await _first(waited, self._stopping, lost):
                    return
            self._set_role(Role.LEADER)
            # When the lease runs out, the role is `connecting` at once and leading cancelled.
            await leadership.Lease(channel, self.names, lease).hold(
                self._lead(connection, lost), on_loss=lambda: self._set_role(Role.CONNECTING)
            )
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
            await self._gauges.read_exchange_stats(fast_path)
        died = asyncio.Event()
        tasks = [
            aiotasks.guarded(session.tracker.run(), name="pool state tracker", on_death=died),
            aiotasks.guarded(
                session.queue_loop.run(session.adopted), name="request-queue loop", on_death=died
            ),
            aiotasks.guarded(session.group_loop.run(), name="worker-group loop", on_death=died),
            aiotasks.guarded(
                self._gauges.run(fast_path, session.snapshot), name="gauges", on_death=died
            ),
            aiotasks.guarded(session.broker_limits.run(), name="broker limits", on_death=died),
            aiotasks.guarded(session.failing.run(), name="failing groups", on_death=died),
        ]
        if session.scaler is not None:
            tasks.append(aiotasks.guarded(session.scaler.run(), name="group scaler", on_death=died))
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
                await aiotasks.stop_all(tasks)

    def _set_role(self, role: Role) -> None:
        if role != self.role:
            logger.info("controller of pool %r: %s", self.settings.pool, role.value)
        self.role = role
        self.metrics.leader.set(1 if role is Role.LEADER else 0)


#: Longest wait for the management API when a standby's status asks who leads.
_FIGURES_TIMEOUT = 5.0


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


def _lease_seconds(url: Any, heartbeat: int) -> float:
    """The leader's lease, in seconds: `LEASE_HEARTBEATS` of the connection's heartbeat (its
    URL's own, else the setting's); 0 (no lease) when heartbeats are off."""
    value = url.query.get("heartbeat") if url is not None else None
    try:
        seconds = float(value) if value is not None else float(heartbeat)
    except ValueError:
        seconds = float(heartbeat)
    return leadership.LEASE_HEARTBEATS * seconds


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
