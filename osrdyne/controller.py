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
import dataclasses
import logging
import os
import socket
import time
from typing import Any

import aio_pika
import aio_pika.abc
import httpx

from drivers.base import Driver
from osrdyne import aiotasks, connections, leadership, logs, topology
from osrdyne.activity import ActivityProcessor
from osrdyne.dead_letters import DeadLetterResponder
from osrdyne.driver_factory import make_driver
from osrdyne.group_loop import WorkerGroupLoop
from osrdyne.management import ManagementApi
from osrdyne.metrics import ColdStartClock, ControllerMetrics, FastPathEstimate
from osrdyne.orphans import OrphanProcessor
from osrdyne.protocol import PoolNames
from osrdyne.queue_loop import RequestQueueLoop
from osrdyne.settings import Settings
from osrdyne.state import GroupStatus, PoolStateTracker

logger = logging.getLogger(__name__)


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
        self.driver = driver if driver is not None else make_driver(settings)
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.metrics = ControllerMetrics()
        self.role = "connecting"
        self.tracker: PoolStateTracker | None = None
        self.queue_loop: RequestQueueLoop | None = None
        self.group_loop: WorkerGroupLoop | None = None
        self.activity: ActivityProcessor | None = None
        self.api = ManagementApi(
            settings.amqp.management_url,
            vhost=settings.amqp.vhost,
            credentials=settings.amqp.credentials,
        )
        self.sessions = 0
        self.last_error: str | None = None
        self._stopping = asyncio.Event()
        self._became_leader = asyncio.Event()

    # -- public ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the controller to stop (safe from a signal handler)."""
        self._stopping.set()

    async def wait_leader(self) -> None:
        """Wait until this controller leads its pool (tests, health checks)."""
        await self._became_leader.wait()

    async def run(self) -> None:
        """Run sessions until `stop()`; then close the driver."""
        failures = 0
        try:
            while not self._stopping.is_set():
                self.sessions += 1
                try:
                    await self._session()
                    failures = 0
                except SESSION_ERRORS as exc:
                    failures += 1
                    self.last_error = logs.redact(f"{type(exc).__name__}: {exc}")
                    logger.warning(
                        "session %d of pool %r ended: %s",
                        self.sessions,
                        self.settings.pool,
                        self.last_error,
                    )
                self._set_role("connecting")
                if not self._stopping.is_set():
                    # Back off between failed sessions; a good session resets the delay.
                    delay = min(10.0, 0.5 * 2 ** min(failures, 5)) if failures else 0.5
                    await _sleep_unless(self._stopping, delay)
        finally:
            await self.driver.close()
            await self.api.close()

    # -- one session ----------------------------------------------------------------------

    async def _session(self) -> None:
        s = self.settings
        connection = await connections.connect(
            s.amqp.url,
            name=f"osrdyne {s.pool} {self.instance}",
            timeout=s.amqp.connect_timeout,
        )
        lost = asyncio.Event()
        connection.close_callbacks.add(lambda *_: lost.set())
        try:
            channel = await connection.channel()
            await topology.declare_pool(channel, self.names)
            await topology.apply_policy(self.api, self.names, s.queues)
            self._set_role("standby")
            acquiring = asyncio.create_task(leadership.acquire(connection, self.names))
            if not await _first(acquiring, self._stopping, lost):
                return
            self._set_role("leader")
            await self._lead(connection, lost)
        finally:
            self.tracker = self.queue_loop = self.group_loop = None
            self.activity = None
            if not connection.is_closed:
                await connection.close()
            if lost.is_set() and not self._stopping.is_set():
                raise ConnectionError("connection to the broker lost")

    async def _lead(self, connection: aio_pika.abc.AbstractConnection, lost: asyncio.Event) -> None:
        s = self.settings
        actual = await topology.list_request_queues(self.api, self.names)
        logger.info("adopting %d existing request queue(s)", len(actual))
        tracker = PoolStateTracker(
            unbind_delay=s.groups.unbind_delay, stop_delay=s.groups.stop_delay, initial=actual
        )
        queue_loop = RequestQueueLoop(
            connection=connection,
            api=self.api,
            names=self.names,
            settings=s.queues,
            tracker=tracker,
            interval=s.groups.loop_interval,
            metrics=self.metrics,
            operation_timeout=s.amqp.operation_timeout,
        )
        group_loop = WorkerGroupLoop(
            driver=self.driver,
            tracker=tracker,
            interval=s.groups.loop_interval,
            metrics=self.metrics,
            pool=s.pool,
            queues_reached=lambda generation: queue_loop.reached.wait_for(
                lambda reached: reached.generation >= generation
            ),
        )
        self.tracker, self.queue_loop, self.group_loop = tracker, queue_loop, group_loop
        cold_starts = ColdStartClock(self.metrics.cold_start_seconds)
        self.activity = ActivityProcessor(
            await connection.channel(publisher_confirms=True, on_return_raises=True),
            names=self.names,
            tracker=tracker,
            metrics=self.metrics,
            cold_starts=cold_starts,
            fold=s.groups.activity_fold,
        )

        async def confirm_channel() -> aio_pika.abc.AbstractChannel:
            return await connection.channel(publisher_confirms=True, on_return_raises=True)

        consumers = [
            OrphanProcessor(
                await confirm_channel(),
                names=self.names,
                tracker=tracker,
                queue_loop=queue_loop,
                metrics=self.metrics,
                cold_starts=cold_starts,
                wait_timeout=s.groups.orphan_wait_timeout,
                prefetch=s.groups.orphan_prefetch,
            ),
            DeadLetterResponder(await confirm_channel(), names=self.names, metrics=self.metrics),
            self.activity,
        ]
        # The fast-path estimate counts from here: read the exchange before taking work.
        fast_path = FastPathEstimate(self.metrics)
        await self._read_exchange_stats(fast_path)
        died = asyncio.Event()
        tasks = [
            aiotasks.guarded(tracker.run(), name="pool state tracker", on_death=died),
            aiotasks.guarded(queue_loop.run(actual), name="request-queue loop", on_death=died),
            aiotasks.guarded(group_loop.run(), name="worker-group loop", on_death=died),
            aiotasks.guarded(self._watch_gauges(fast_path), name="gauges", on_death=died),
        ]
        try:
            for consumer in consumers:
                await consumer.start()
            self._became_leader.set()
            await _first(self._stopping, lost, died)
            if died.is_set() and not self._stopping.is_set():
                raise ComponentDied("a controller component died; starting a new session")
        finally:
            grace = 5.0 if self._stopping.is_set() else 0.5
            await asyncio.gather(*(c.stop(grace) for c in consumers))
            await aiotasks.stop_all(tasks)
            self._became_leader.clear()

    async def _watch_gauges(self, fast_path: FastPathEstimate) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(1.0)
            ticks += 1
            if ticks % 5 == 0:  # the broker refreshes its statistics every 5 s by default
                await self._read_exchange_stats(fast_path)
            tracker, queue_loop, group_loop = self.tracker, self.queue_loop, self.group_loop
            if tracker is None or queue_loop is None or group_loop is None:
                continue
            groups = tracker.state.value.groups
            for state in GroupStatus:
                self.metrics.groups.labels(state.value).set(
                    sum(1 for v in groups.values() if v is state)
                )
            generation = tracker.generation
            self.metrics.generation_lag.labels("queues").set(
                generation - queue_loop.reached.value.generation
            )
            self.metrics.generation_lag.labels("groups").set(generation - group_loop.reached.value)

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

    def _set_role(self, role: str) -> None:
        if role != self.role:
            logger.info("controller of pool %r: %s", self.settings.pool, role)
        self.role = role
        self.metrics.leader.set(1 if role == "leader" else 0)

    # -- status ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """A snapshot of what this controller knows (served by the HTTP API)."""
        doc: dict[str, Any] = {
            "pool": self.settings.pool,
            "instance": self.instance,
            "role": self.role,
            "sessions": self.sessions,
            "last_error": self.last_error,
            "driver": self.settings.driver.kind,
            "time": time.time(),
        }
        tracker, queue_loop, group_loop = self.tracker, self.queue_loop, self.group_loop
        if tracker is None or queue_loop is None or group_loop is None:
            doc["groups"] = {}
            return doc
        reached = queue_loop.reached.value
        doc["generations"] = {
            "tracker": tracker.generation,
            "queues": reached.generation,
            "groups": group_loop.reached.value,
        }
        groups: dict[str, Any] = {}
        workers = self._describe_workers()
        last_seen = self.activity.last_seen if self.activity is not None else {}
        for key in sorted(
            set(tracker.state.value.groups) | set(reached.actual) | group_loop.running
        ):
            expected = tracker.state.value.groups.get(key)
            queue = reached.actual.get(key)
            groups[key] = {
                "state": expected.value if expected else "stopping",
                "queue": queue.value if queue else None,
                "running": key in group_loop.running,
                "error": reached.errors.get(key) or group_loop.errors.get(key),
                "last_activity": last_seen.get(key),
            }
            if workers is not None:
                infos = workers.get(key, [])
                groups[key]["workers"] = infos
                groups[key]["restarts"] = sum(int(w.get("restarts") or 0) for w in infos)
        doc["groups"] = groups
        return doc

    def _describe_workers(self) -> dict[str, list[dict[str, Any]]] | None:
        """Per-worker details from drivers that can give them (`describe()`), else None."""
        describe = getattr(self.driver, "describe", None)
        if describe is None:
            return None
        try:
            described = describe()
        except Exception:  # status must answer even when a driver cannot describe itself
            logger.exception("driver describe() failed")
            return None
        return {
            key: [dataclasses.asdict(w) if _is_instance(w) else dict(w) for w in infos]
            for key, infos in described.items()
        }


def _is_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


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
