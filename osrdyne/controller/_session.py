"""One leader session's components, built whole or not at all.

When a controller becomes the leader of its pool it rebuilds the expected state from the
request queues that exist (adoption), then builds the tracker, both control loops and the
three consumers around one connection. They live and die together: the controller holds a
`Session` or nothing, never a half-built one, and everything that reads them (status, gauges)
reads one consistent set.

An operator acts on the pool through the session that leads it: `warm` requires a key's group
before its first request (through the same gate as an orphan), `stop` sends a group through
its two-stage stop now.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import aio_pika
import aio_pika.abc
import aio_pika.exceptions

from drivers.base import Assign, Capacity, Driver, Sizes
from osrdyne import wire
from osrdyne.controller._decisions import scaling
from osrdyne.controller._decisions.admission import Admission, GroupCount
from osrdyne.controller._decisions.gate import Gate, KeyRefused
from osrdyne.controller._decisions.history import EventKind, KeyHistory
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects import topology
from osrdyne.controller._effects.activity import ActivityProcessor
from osrdyne.controller._effects.broker_events import BrokerEvents
from osrdyne.controller._effects.broker_limits import BrokerLimits
from osrdyne.controller._effects.consumer import QueueConsumer
from osrdyne.controller._effects.dead_letters import DeadLetterResponder
from osrdyne.controller._effects.failing import FailingGroups
from osrdyne.controller._effects.group_loop import WorkerGroupLoop
from osrdyne.controller._effects.group_scaler import GroupScaler
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.controller._effects.orphans import OrphanProcessor
from osrdyne.controller._effects.queue_loop import RequestQueueLoop
from osrdyne.controller._effects.snapshot import SessionSnapshot
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.controller._settings import Settings
from osrdyne.ops.metrics import ColdStartClock, ControllerMetrics
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Session:
    """The components of one leader session."""

    #: The request queues found at the start (key -> bound or not): what was adopted.
    adopted: Mapping[str, GroupStatus]
    tracker: PoolStateTracker
    queue_loop: RequestQueueLoop
    group_loop: WorkerGroupLoop
    activity: ActivityProcessor
    #: What every new group passes, for orphans and for warm alike.
    gate: Gate
    #: The caps on new groups the gate checks (and shows in `/status`).
    admission: Admission
    #: The broker's limits, read periodically while the session leads (`run()`).
    broker_limits: BrokerLimits
    #: The controller's history of each key (it outlives sessions).
    history: KeyHistory
    #: Seconds an operator-stopped group drains before its workers stop.
    stop_drain: float
    #: Dead letters, activity, then orphans: started in this order once the loops run, so
    #: the controller takes orphans (and starts groups) only when it can hear from them.
    consumers: tuple[QueueConsumer, ...]
    #: The broker's queue and binding events (a queue deleted behind the loop's back).
    events: BrokerEvents
    #: Gives a key to a standby worker (for a driver that keeps them, `drivers.base.Standby`).
    assign: Assign
    #: The groups whose workers keep failing to start, answered for at once.
    failing: FailingGroups
    #: Sizes the groups (None: `scaling.max_workers` unset, or a driver that cannot size).
    scaler: GroupScaler | None = None

    def snapshot(self) -> SessionSnapshot:
        """The components' figures now (what the status document and the gauges read)."""
        return SessionSnapshot(
            expected=self.tracker.state.value.groups,
            generation=self.tracker.generation,
            queues=self.queue_loop.reached.value,
            listing=self.queue_loop.listing,
            groups_generation=self.group_loop.reached.value,
            running=self.group_loop.running,
            group_errors=self.group_loop.errors,
            last_seen=self.activity.last_seen,
            failing=self.failing.breakers.failing,
            scaling=self.scaler.view if self.scaler is not None else None,
            admission=self.admission.report(),
            broker=self.admission.broker_report(),
            broker_figures=self.broker_limits.figures,
        )

    def warm(self, key: str, *, by: str) -> int:
        """Require the group of `key` as its first orphan would, without a request; return
        the generation from which it is Active. `KeyRefused` when the gate refuses the key."""
        refusal = self.gate.admit(key)
        if refusal is not None:
            raise KeyRefused(refusal)
        self.history.record(key, EventKind.WARM, f"asked by {by}")
        return self.tracker.require(key, cause="an operator's warm")

    def stop(self, key: str, *, by: str) -> int | None:
        """Unbind the group of `key` now and stop it after `stop_drain` seconds (see
        `PoolStateTracker.stop`); None when it has no group."""
        if key not in self.tracker.state.value.groups:
            return None
        self.history.record(key, EventKind.STOP, f"asked by {by}")
        return self.tracker.stop(key, drain=self.stop_drain)


async def build(
    connection: aio_pika.abc.AbstractConnection,
    *,
    settings: Settings,
    names: PoolNames,
    api: ManagementApi,
    driver: Driver,
    metrics: ControllerMetrics,
    history: KeyHistory,
) -> Session:
    """Adopt what exists and build every component (nothing runs yet)."""
    s = settings
    adopted = await topology.list_request_queues(api, names)
    logger.info("adopting %d existing request queue(s)", len(adopted))
    tracker = PoolStateTracker(
        unbind_delay=s.groups.unbind_delay,
        stop_delay=s.groups.stop_delay,
        initial=adopted,
        history=history,
    )
    queue_loop = RequestQueueLoop(
        connection=connection,
        api=api,
        names=names,
        settings=s.queues,
        tracker=tracker,
        interval=s.groups.loop_interval,
        listing_interval=s.groups.listing_interval,
        metrics=metrics,
        operation_timeout=s.amqp.operation_timeout,
    )
    group_loop = WorkerGroupLoop(
        driver=driver,
        tracker=tracker,
        interval=s.groups.loop_interval,
        metrics=metrics,
        pool=s.pool,
        queues_reached=lambda generation: queue_loop.reached.wait_for(
            lambda reached: reached.generation >= generation
        ),
        history=history,
    )
    cold_starts = ColdStartClock(metrics.cold_start_seconds)

    groups = GroupCount(
        expected=lambda: tracker.state.value.groups,
        running=lambda: group_loop.running,
        actual=lambda: queue_loop.reached.value.actual,
        removals=lambda: tracker.removals,
    )
    broker_limits = BrokerLimits(
        api,
        interval=s.broker.check_interval,
        timeout=s.broker.check_timeout,
        groups=groups,
        pool=names.pool,
    )
    admission = Admission(
        max_groups=s.groups.max_groups,
        capacity=driver.capacity if isinstance(driver, Capacity) else lambda: None,
        groups=groups,
        broker=broker_limits,
        limits=s.broker,
        on_refusal=lambda reason: metrics.admission_refusals.labels(reason).inc(),
    )
    gate = Gate(names, lambda: tracker.state.value.groups, new_key=admission.checks)

    async def confirm_channel() -> aio_pika.abc.AbstractChannel:
        return await connection.channel(publisher_confirms=True, on_return_raises=True)

    # What the consumers publish (forwarded orphans, error answers, poison) goes through one
    # confirmed channel that is replaced when the broker keeps refusing it.
    publisher = wire.RenewingChannel(
        connection,
        name=f"osrdyne {names.pool} publisher",
        on_return_raises=True,
        confirm_timeout=s.amqp.operation_timeout,
    )

    failing = FailingGroups(
        connection=connection,
        names=names,
        publisher=publisher,
        tracker=tracker,
        driver=driver,
        queue_exists=lambda key: key in queue_loop.reached.value.actual,
        metrics=metrics,
        threshold=s.groups.failing_after,
        window=s.groups.failing_window,
        history=history,
    )
    scaler = None
    c = s.scaling
    if c.max_workers is not None and not isinstance(driver, Sizes):
        logger.warning(
            "scaling.max_workers is set but the %s driver cannot size groups: ignored",
            s.driver.kind,
        )
    if isinstance(driver, Sizes) and c.max_workers is not None:
        scaler = GroupScaler(
            driver=driver,
            tracker=tracker,
            names=names,
            channel=lambda: _open_channel(connection),
            policy=scaling.Policy(
                min_workers=c.min_workers,
                max_workers=c.max_workers,
                scale_in_window=c.scale_in_window,
                target_busy=c.target_busy,
                drain_seconds=c.drain_seconds,
            ),
            interval=c.interval,
            metrics=metrics,
        )
    activity = ActivityProcessor(
        await confirm_channel(),
        names=names,
        tracker=tracker,
        metrics=metrics,
        cold_starts=cold_starts,
        fold=s.groups.activity_fold,
        history=history,
        failing=failing,
        on_report=scaler.report if scaler is not None else None,
    )
    orphans = OrphanProcessor(
        await confirm_channel(),
        names=names,
        tracker=tracker,
        queue_loop=queue_loop,
        metrics=metrics,
        cold_starts=cold_starts,
        wait_timeout=s.groups.orphan_wait_timeout,
        prefetch=s.groups.orphan_prefetch,
        gate=gate,
        publisher=publisher,
    )
    dead_letters = DeadLetterResponder(
        await confirm_channel(),
        names=names,
        metrics=metrics,
        history=history,
        publisher=publisher,
    )

    async def assign(standby_queue: str, key: str) -> bool:
        """Publish the assignment of `key` to a standby worker's queue (docs/protocol.md):
        mandatory and confirmed, so a queue that does not exist (the worker is not waiting)
        is known at once, and the driver starts a worker for the key instead."""
        message = aio_pika.Message(
            wire.assignment(names, key), content_type=wire.ASSIGNMENT_CONTENT_TYPE
        )

        async def send(channel: aio_pika.abc.AbstractChannel) -> None:
            await channel.default_exchange.publish(
                message, routing_key=standby_queue, mandatory=True
            )

        try:
            await publisher.publish(send, retry=False)
        except aio_pika.exceptions.PublishError:  # returned: no such standby queue
            return False
        return True

    return Session(
        adopted=adopted,
        tracker=tracker,
        queue_loop=queue_loop,
        group_loop=group_loop,
        activity=activity,
        gate=gate,
        admission=admission,
        broker_limits=broker_limits,
        history=history,
        stop_drain=s.groups.stop_drain,
        consumers=(dead_letters, activity, orphans),
        events=BrokerEvents(connection, names=names, vhost=api.vhost, queue_loop=queue_loop),
        assign=assign,
        failing=failing,
        scaler=scaler,
    )


async def _open_channel(
    connection: aio_pika.abc.AbstractConnection,
) -> aio_pika.abc.AbstractChannel:
    return await connection.channel()
