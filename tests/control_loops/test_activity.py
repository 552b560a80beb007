"""The activity processor without a broker: reports folded into tracker updates, on a fake
clock. The deliveries are plain stand-ins for what it reads of an AMQP message (routing key,
headers, ack); the broker path is covered by tests/dispatch and tests/faults."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects.activity import ActivityProcessor
from osrdyne.controller._effects.tracker import PoolStateTracker
from osrdyne.ops.metrics import ColdStartClock, ControllerMetrics
from osrdyne.wire import PoolNames
from tests.control_loops.conftest import Clock


@dataclasses.dataclass
class Delivery:
    routing_key: str
    headers: dict[str, Any]
    acked: bool = False

    async def ack(self) -> None:
        self.acked = True


def report(key: str, event: str | bytes = "request-received") -> Delivery:
    return Delivery(key, {"x-event": event, "x-worker-id": b"w-1"})


@pytest.fixture
def tracker(clock: Clock) -> PoolStateTracker:
    return PoolStateTracker(unbind_delay=10, stop_delay=5, clock=clock)


@pytest.fixture
def metrics() -> ControllerMetrics:
    return ControllerMetrics()


@pytest.fixture
def processor(
    tracker: PoolStateTracker, metrics: ControllerMetrics, clock: Clock
) -> ActivityProcessor:
    return ActivityProcessor(
        None,  # type: ignore[arg-type]  # the channel is only used to consume
        names=PoolNames("p"),
        tracker=tracker,
        metrics=metrics,
        cold_starts=ColdStartClock(metrics.cold_start_seconds),
        fold=1.0,
        clock=clock,
    )


def counted(metrics: ControllerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_report_keeps_its_group_active(
    processor: ActivityProcessor, tracker: PoolStateTracker, clock: Clock
) -> None:
    tracker.require("k")
    clock.advance(8)
    delivery = report("k")
    await processor.handle(delivery)  # type: ignore[arg-type]
    assert delivery.acked
    clock.advance(8)  # 16 s after the require, 8 after the report: still within unbind_delay
    tracker.advance()
    assert tracker.state.value.groups == {"k": GroupStatus.ACTIVE}
    clock.advance(4)  # past the report's unbind_delay + its fold window
    tracker.advance()
    assert tracker.state.value.groups == {"k": GroupStatus.UNBOUND}


async def test_loading_reports_keep_a_starting_group_active_without_a_line_each(
    processor: ActivityProcessor,
    tracker: PoolStateTracker,
    clock: Clock,
    metrics: ControllerMetrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tracker.require("k")
    for _ in range(6):  # a load of 30 s, three times unbind_delay, reported every 5 s
        clock.advance(5)
        await processor.handle(report("k", "loading"))  # type: ignore[arg-type]
        tracker.advance()
        assert tracker.state.value.groups == {"k": GroupStatus.ACTIVE}
    assert counted(metrics, "osrdyne_activity_events_total", event="loading") == 6
    assert not [r for r in caplog.records if "loading" in r.getMessage()]


async def test_reports_closer_than_the_fold_become_one_update(
    processor: ActivityProcessor,
    tracker: PoolStateTracker,
    metrics: ControllerMetrics,
    clock: Clock,
) -> None:
    tracker.require("k")
    version = tracker.state.version
    for _ in range(5):
        await processor.handle(report("k", b"request-received"))  # type: ignore[arg-type]
        clock.advance(0.1)
    assert counted(metrics, "osrdyne_activity_folded_total") == 4
    assert counted(metrics, "osrdyne_activity_events_total", event="request-received") == 5
    assert tracker.state.version == version  # an active group's deadline moves silently


@pytest.mark.parametrize(
    "delivery",
    [
        report("k", "exploded"),
        report("k", b"\xff"),
        Delivery("k", {}),
        report(""),
        report("bell\x07"),
    ],
    ids=["unknown event", "event not UTF-8", "no event", "empty key", "control character"],
)
async def test_malformed_reports_are_acked_counted_and_change_nothing(
    processor: ActivityProcessor,
    tracker: PoolStateTracker,
    metrics: ControllerMetrics,
    delivery: Delivery,
) -> None:
    tracker.require("k")
    version = tracker.state.version
    await processor.handle(delivery)  # type: ignore[arg-type]
    assert delivery.acked
    assert counted(metrics, "osrdyne_activity_malformed_total") == 1
    assert tracker.state.version == version and processor.last_seen == {}


async def test_failed_starts_go_to_the_breaker_and_keep_no_group_alive(
    tracker: PoolStateTracker, metrics: ControllerMetrics, clock: Clock
) -> None:
    from drivers.memory import MemoryDriver
    from osrdyne.controller._effects.failing import FailingGroups

    failing = FailingGroups(
        connection=None,  # type: ignore[arg-type]  # only its run() consumes
        names=PoolNames("p"),
        publisher=None,  # type: ignore[arg-type]
        tracker=tracker,
        driver=MemoryDriver(),
        queue_exists=lambda key: False,
        metrics=metrics,
        threshold=2,
        window=60,
        clock=clock,
    )
    processor = ActivityProcessor(
        None,  # type: ignore[arg-type]
        names=PoolNames("p"),
        tracker=tracker,
        metrics=metrics,
        cold_starts=ColdStartClock(metrics.cold_start_seconds),
        fold=1.0,
        clock=clock,
        failing=failing,
    )
    tracker.require("k")
    for _ in range(2):
        failed = report("k", "start-failed")
        failed.headers["x-reason"] = "ImportError: no module named 'x'\n\x1b[2J"
        await processor.handle(failed)  # type: ignore[arg-type]
    state = failing.failing("k")
    assert state is not None and state.reason == "ImportError: no module named 'x' [2J"
    assert "k" not in processor.last_seen  # a failed start is no sign of life
    await processor.handle(report("k", "started"))  # type: ignore[arg-type]
    assert "k" not in processor.last_seen  # nor is a failing group's worker starting again
    clock.advance(11)  # past unbind_delay since the require
    tracker.advance()
    assert tracker.state.value.groups == {"k": GroupStatus.UNBOUND}
    await processor.handle(report("k", "ready"))  # type: ignore[arg-type]
    assert failing.failing("k") is None
    assert tracker.state.value.groups == {"k": GroupStatus.ACTIVE}
