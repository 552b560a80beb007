"""The caps on new keys, decided without a broker: the broker's figures read from hostile
management API answers, the broker's room with the queues asked since the last reading, and
the group cap counting every group the pool has (those being started included)."""

from __future__ import annotations

from osrdyne import wire
from osrdyne.controller._broker_settings import BrokerLimitSettings
from osrdyne.controller._decisions.admission import (
    Admission,
    GroupCount,
    broker_refusal,
    broker_room,
)
from osrdyne.controller._decisions.broker_figures import (
    BrokerFigures,
    figures_of,
    is_pool_connection,
    nodes_of,
)
from osrdyne.controller._decisions.gate import Gate
from osrdyne.controller._effects.tracker import PoolStateTracker
from tests.control_loops.conftest import Clock

LIMITS = BrokerLimitSettings(fds_per_queue=2, fd_headroom=100, processes_per_queue=10,
                             process_headroom=1000)  # fmt: skip


def figures(**given: object) -> BrokerFigures:
    base: dict[str, object] = {
        "name": "rabbit@a", "fd_used": 100, "fd_total": 1024, "proc_used": 500,
        "proc_total": 1_048_576, "mem_alarm": False, "disk_free_alarm": False,
    }  # fmt: skip
    return figures_of([{**base, **given}], {"object_totals": {"queues": 7}}, at=1.0)


def test_the_tightest_running_node_speaks_and_any_alarm_counts() -> None:
    nodes = [
        {"name": "a", "fd_used": 10, "fd_total": 20000, "proc_used": 1, "proc_total": 10**6},
        {"name": "b", "fd_used": 900, "fd_total": 1024, "proc_used": 1, "proc_total": 10**6},
        {"name": "c", "running": False, "fd_used": 1023, "fd_total": 1024},  # down: no say
        {"name": "d", "fd_used": 5, "fd_total": 20000, "mem_alarm": True},
    ]
    f = figures_of(nodes, {"object_totals": {"queues": 3}}, at=5.0)
    assert (f.node, f.fd_used, f.fd_total, f.queues, f.mem_alarm) == ("b", 900, 1024, 3, True)


def test_hostile_figures_are_unknown_never_zero() -> None:
    f = figures_of(
        [{"name": 3, "fd_used": "lots", "fd_total": -1, "proc_used": True, "mem_alarm": "yes"}],
        {"object_totals": "none"},
        at=0.0,
    )
    assert (f.node, f.fd_used, f.fd_total, f.proc_used, f.queues) == (None,) * 5
    assert f.mem_alarm is False
    assert broker_refusal(f, LIMITS, 10_000) is None and broker_room(f, LIMITS, 0) is None
    empty = figures_of([], {}, at=0.0)
    assert broker_refusal(empty, LIMITS, 0) is None


def test_file_descriptors_refuse_before_the_headroom_counting_queues_since_reading() -> None:
    f = figures(fd_used=100, fd_total=1024)  # 924 free, 100 kept: 824 fds, 412 queues
    assert broker_room(f, LIMITS, 0) == 412
    assert broker_refusal(f, LIMITS, 411) is None
    refusal = broker_refusal(f, LIMITS, 412)
    assert refusal is not None and refusal.status is wire.Status.OVERLOADED
    assert refusal.reason == "broker_fd" and refusal.details is not None
    assert refusal.details["new_queues"] == 412 and refusal.details["total"] == 1024
    assert broker_room(f, LIMITS, 500) == 0


def test_processes_and_alarms() -> None:
    f = figures(proc_used=1_047_570, proc_total=1_048_576)
    refusal = broker_refusal(f, LIMITS, 0)
    assert refusal is not None and refusal.reason == "broker_processes"
    memory = broker_refusal(figures(mem_alarm=True), LIMITS, 0)
    assert memory is not None and memory.reason == "broker_memory_alarm"
    disk = broker_refusal(figures(disk_free_alarm=True), LIMITS, 0)
    assert disk is not None and disk.reason == "broker_disk_alarm"
    lenient = LIMITS.model_copy(update={"refuse_on_alarm": False})
    assert broker_refusal(figures(mem_alarm=True), lenient, 0) is None


def test_the_cap_counts_groups_being_started_and_stopped(clock: Clock) -> None:
    tracker = PoolStateTracker(unbind_delay=10, stop_delay=5, clock=clock)
    stopping: set[str] = set()

    def groups() -> int:
        expected = tracker.state.value.groups
        return len(expected) + sum(1 for key in stopping if key not in expected)

    admission = Admission(
        max_groups=2, capacity=lambda: None, groups=groups, broker=None, limits=LIMITS
    )
    gate = Gate(wire.PoolNames("p"), lambda: tracker.state.value.groups, new_key=admission.checks)
    admitted = []
    for key in ("a", "b", "c", "d"):  # a burst: each required as soon as admitted
        if gate.admit(key) is None:
            tracker.require(key)
            admitted.append(key)
    assert admitted == ["a", "b"]
    refusal = gate.admit("c")
    assert refusal is not None and refusal.reason == "max_groups"
    assert refusal.details == {"limit": 2, "groups": 2}
    assert gate.admit("a") is None  # a key with a group keeps working
    tracker.stop("a", drain=0)
    clock.advance(1)
    tracker.advance()
    stopping.add("a")  # left the expected state, its workers not stopped yet: still counted
    assert gate.admit("c") is not None
    stopping.clear()  # the driver stopped it
    assert gate.admit("c") is None
    report = admission.report()
    assert (report.groups, report.max_groups, report.refusing) == (1, 2, None)
    assert report.refused == {"max_groups": 4}  # c, d, c, c: each refusal counted


def test_driver_capacity(clock: Clock) -> None:
    tracker = PoolStateTracker(unbind_delay=10, stop_delay=5, clock=clock)
    admission = Admission(
        max_groups=None,
        capacity=lambda: 1,
        groups=lambda: len(tracker.state.value.groups),
        broker=None,
        limits=LIMITS,
    )
    assert admission.driver_capacity("a") is None
    tracker.require("a")
    refusal = admission.driver_capacity("b")
    assert refusal is not None and refusal.reason == "driver_capacity"
    assert admission.report().refusing == "driver_capacity"


def test_queues_count_their_file_descriptors_even_before_they_open_them() -> None:
    # 300 queues at 2 fds each: 600, though the broker reports only 120 fds in use now.
    f = figures_of(
        [{"fd_used": 120, "fd_total": 1024, "proc_used": 1, "proc_total": 10**6}],
        {"object_totals": {"queues": 300}},
        at=0.0,
    )
    assert broker_room(f, LIMITS, 0) == (1024 - 100 - 600) // 2 == 162
    refusal = broker_refusal(f, LIMITS, 162)
    assert refusal is not None and refusal.reason == "broker_fd"
    assert broker_refusal(f, LIMITS, 161) is None


def test_the_group_count_follows_removals_and_new_passes(clock: Clock) -> None:
    tracker = PoolStateTracker(unbind_delay=10, stop_delay=5, clock=clock)
    seen: dict[str, object] = {"running": frozenset[str](), "actual": {}}
    count = GroupCount(
        expected=lambda: tracker.state.value.groups,
        running=lambda: seen["running"],  # type: ignore[arg-type,return-value]
        actual=lambda: seen["actual"],  # type: ignore[arg-type,return-value]
        removals=lambda: tracker.removals,
    )
    for key in "abc":
        tracker.require(key)
    assert count() == 3
    seen["running"], seen["actual"] = frozenset("abc"), dict.fromkeys("abc")  # a pass saw them
    assert count() == 3
    tracker.stop("a", drain=0)
    clock.advance(1)
    tracker.advance()  # "a" left the expected state: its workers and queue still exist
    assert "a" not in tracker.state.value.groups and count() == 3
    tracker.require("d")  # a new key while "a" is being stopped
    assert count() == 4
    tracker.require("a")  # back before it was gone: counted once
    assert count() == 4
    seen["running"], seen["actual"] = frozenset("abcd"), dict.fromkeys("abcd")
    assert count() == 4


def test_node_health_counts_only_the_pools_connections_and_checks_what_it_reads() -> None:
    """`nodes_of` (pure): each node's health, the pool's connections on it by the names
    osrdyne gives them; hostile or missing fields read as unknown, never as a crash."""
    nodes = [
        {"name": "rabbit@b", "running": True, "partitions": ["rabbit@c"], "mem_alarm": True},
        {"name": "rabbit@a", "running": True, "partitions": [], "disk_free_alarm": True},
        {"name": "rabbit@c", "running": False, "partitions": "garbage"},
        {"name": 42},
    ]
    connections = [
        {"node": "rabbit@a", "client_properties": {"connection_name": "osrdyne p host:1:x"}},
        {"node": "rabbit@a", "client_properties": {"connection_name": "worker w1 (p)"}},
        {"node": "rabbit@b", "client_properties": {"connection_name": "worker w2 (p)"}},
        {"node": "rabbit@b", "client_properties": {"connection_name": "worker w3 (other)"}},
        {"node": "rabbit@b", "client_properties": {"connection_name": "osrdyne pool2 x"}},
        {"node": "rabbit@b", "client_properties": "not a table"},
        {"node": None, "client_properties": {"connection_name": "worker w4 (p)"}},
    ]
    a, b, c = nodes_of(nodes, connections, pool="p")
    assert (a.name, a.running, a.partitions, a.disk_alarm, a.pool_connections) == (
        "rabbit@a",
        True,
        (),
        True,
        2,
    )
    assert (b.partitions, b.mem_alarm, b.pool_connections) == (("rabbit@c",), True, 1)
    assert (c.running, c.partitions, c.pool_connections) == (False, (), 0)
    unknown = nodes_of(nodes, None, pool="p")
    assert all(n.pool_connections is None for n in unknown)
    assert not is_pool_connection("p", "osrdyne px y") and not is_pool_connection("p", None)
