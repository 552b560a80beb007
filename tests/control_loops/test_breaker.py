"""The failing groups' breakers without a broker, on a fake clock: which failed starts count,
when a group becomes failing, and what ends it (`osrdyne.controller._decisions.breaker`)."""

from __future__ import annotations

from typing import Any

from drivers.base import WorkerInfo
from osrdyne.controller._decisions.breaker import Breakers, exit_reason
from tests.control_loops.conftest import Clock


def view(breakers: Breakers, clock: Clock, described: dict[str, list[WorkerInfo]]) -> list[Any]:
    return breakers.observe(described, expected={"k", "new"}, now=clock(), wall=1.0)


def fail(breakers: Breakers, clock: Clock, key: str = "k", worker: str = "w-0", why: str = "no"):
    return breakers.failed_start(key, why, now=clock(), wall=1.0, worker_id=worker)


def test_a_group_is_failing_after_the_threshold_within_the_window(clock: Clock) -> None:
    breakers = Breakers(threshold=3, window=10)
    assert fail(breakers, clock).failing is None
    clock.advance(11)  # the first falls out of the window
    assert fail(breakers, clock).failing is None
    assert fail(breakers, clock).failing is None
    assert "k" not in breakers.failing
    change = fail(breakers, clock, why="FileNotFoundError: /data/x")
    assert change.failing is True
    failing = breakers.failing["k"]
    assert (failing.reason, failing.failed_starts) == ("FileNotFoundError: /data/x", 3)


def test_a_failing_group_stays_failing_past_its_window_until_a_worker_serves(
    clock: Clock,
) -> None:
    breakers = Breakers(threshold=2, window=5)
    fail(breakers, clock)
    assert fail(breakers, clock).failing is True
    clock.advance(60)
    assert fail(breakers, clock, why="later").failing is None  # still open, reason updated
    assert breakers.failing["k"].reason == "later"
    assert breakers.failing["k"].failed_starts == 3
    assert breakers.served("k", "w-0").failing is False
    assert breakers.failing == {}
    assert fail(breakers, clock).failing is None  # the count starts over


def test_serving_resets_the_count_of_a_group_not_yet_failing(clock: Clock) -> None:
    breakers = Breakers(threshold=2, window=60)
    fail(breakers, clock)
    assert breakers.served("k", "w-0").failing is None
    assert fail(breakers, clock).failing is None


def test_exits_of_workers_that_never_served_count_with_their_status(clock: Clock) -> None:
    breakers = Breakers(threshold=2, window=60)
    worker = WorkerInfo(worker_id="w-0")
    assert view(breakers, clock, {"k": [worker]}) == []
    worker.restarts, worker.last_exit = 1, 3
    assert [c.failing for c in view(breakers, clock, {"k": [worker]})] == [None]
    worker.restarts = 2
    (change,) = view(breakers, clock, {"k": [worker]})
    assert change.failing is True
    assert breakers.failing["k"].reason == "a worker exited with status 3 before serving"


def test_exits_from_before_the_watch_are_not_counted(clock: Clock) -> None:
    breakers = Breakers(threshold=1, window=60)
    adopted = WorkerInfo(worker_id="w-0", restarts=7, last_exit=1)
    assert view(breakers, clock, {"k": [adopted]}) == []  # the first view: adopted
    lingering = WorkerInfo(worker_id="w-1", restarts=4, last_exit=1)
    # A group the driver describes while it is not expected (still being stopped)...
    assert breakers.observe({"old": [lingering]}, expected=set(), now=clock(), wall=1.0) == []
    # ...and required again before it is gone: its earlier exits are not this group's.
    assert breakers.observe({"old": [lingering]}, expected={"old"}, now=clock(), wall=1.0) == []
    assert breakers.failing == {}


def test_a_new_group_counts_from_its_first_exit(clock: Clock) -> None:
    """A group that appears in the driver's view with an exit already (a worker that failed
    before the first look) counts it."""
    breakers = Breakers(threshold=1, window=60)
    view(breakers, clock, {})
    (change,) = view(breakers, clock, {"new": [WorkerInfo(worker_id="w", restarts=1)]})
    assert change.failing is True


def test_a_worker_that_served_then_exited_is_a_crash_not_a_failed_start(clock: Clock) -> None:
    breakers = Breakers(threshold=1, window=60)
    worker = WorkerInfo(worker_id="w-0")
    view(breakers, clock, {"k": [worker]})
    breakers.served("k", "w-0")
    worker.restarts, worker.last_exit = 1, -9
    assert view(breakers, clock, {"k": [worker]}) == []
    worker.restarts = 2  # its next life never served
    (change,) = view(breakers, clock, {"k": [worker]})
    assert change.failing is True
    assert "SIGKILL" in breakers.failing["k"].reason


def test_an_exit_is_judged_once_the_ready_sent_before_it_could_arrive(clock: Clock) -> None:
    """A worker sends `ready`, takes a request that kills it; the driver's view shows the exit
    before the activity processor has handed the `ready` over. Judged `settle` seconds after
    it was seen, the exit is a crash; an exit that no report explains is a failed start."""
    breakers = Breakers(threshold=1, window=60, settle=2)
    worker = WorkerInfo(worker_id="w-0")
    view(breakers, clock, {"k": [worker]})
    worker.restarts, worker.last_exit = 1, 17
    assert view(breakers, clock, {"k": [worker]}) == []  # seen, not judged yet
    clock.advance(1)
    breakers.served("k", "w-0")  # the `ready` of the life that crashed, heard late
    clock.advance(1)
    assert view(breakers, clock, {"k": [worker]}) == []  # judged: a crash
    worker.restarts = 2  # the next life never serves
    assert view(breakers, clock, {"k": [worker]}) == []
    clock.advance(1.9)
    assert view(breakers, clock, {"k": [worker]}) == []
    clock.advance(0.1)
    (change,) = view(breakers, clock, {"k": [worker]})
    assert change.failing is True
    assert breakers.failing["k"].reason == "a worker exited with status 17 before serving"


def test_each_life_of_a_reused_worker_id_is_matched_to_its_own_exit(clock: Clock) -> None:
    """A driver restarts a slot under the same worker id: the next life's `ready` may come
    before the previous exit is judged. Counted per life, two lives that served and crashed
    are two crashes (a request killing every worker is a poison request, not a group that
    cannot start), and a third life that never serves is a failed start."""
    breakers = Breakers(threshold=1, window=60, settle=2)
    worker = WorkerInfo(worker_id="w-0")
    view(breakers, clock, {"k": [worker]})
    breakers.served("k", "w-0")
    worker.restarts, worker.last_exit = 1, 17
    assert view(breakers, clock, {"k": [worker]}) == []
    clock.advance(1)
    breakers.served("k", "w-0")  # the second life is ready before the first exit is judged
    breakers.served("k", "w-0", ready=False)  # and receives a request: the same life
    worker.restarts = 2
    assert view(breakers, clock, {"k": [worker]}) == []
    clock.advance(5)
    assert view(breakers, clock, {"k": [worker]}) == []
    assert breakers.failing == {}
    worker.restarts = 3
    view(breakers, clock, {"k": [worker]})
    clock.advance(2)
    (change,) = view(breakers, clock, {"k": [worker]})
    assert change.failing is True


def test_reports_of_successive_lives_count_each_exit_once(clock: Clock) -> None:
    """Two lives report `start-failed` before the first exit is judged: two failed starts,
    not four (each report matches one exit), and not three."""
    breakers = Breakers(threshold=3, window=60, settle=2)
    worker = WorkerInfo(worker_id="w-0")
    view(breakers, clock, {"k": [worker]})
    fail(breakers, clock)
    worker.restarts, worker.last_exit = 1, 1
    view(breakers, clock, {"k": [worker]})
    fail(breakers, clock)
    worker.restarts = 2
    view(breakers, clock, {"k": [worker]})
    clock.advance(3)
    assert view(breakers, clock, {"k": [worker]}) == []
    assert "k" not in breakers.failing
    assert fail(breakers, clock).failing is True  # the third


def test_a_reported_failure_and_its_exit_count_once_and_keep_the_reported_reason(
    clock: Clock,
) -> None:
    breakers = Breakers(threshold=2, window=60)
    worker = WorkerInfo(worker_id="w-0")
    view(breakers, clock, {"k": [worker]})
    fail(breakers, clock, why="ImportError: no module named x")
    worker.restarts, worker.last_exit = 1, 1
    assert view(breakers, clock, {"k": [worker]}) == []
    assert "k" not in breakers.failing
    worker.restarts = 2  # an exit without a report this time: counted, reason kept
    (change,) = view(breakers, clock, {"k": [worker]})
    assert change.failing is True
    assert breakers.failing["k"].reason == "ImportError: no module named x"


def test_groups_no_longer_expected_are_forgotten(clock: Clock) -> None:
    breakers = Breakers(threshold=1, window=60)
    fail(breakers, clock, key="gone")
    fail(breakers, clock, key="kept")
    assert breakers.keep({"kept": object()}) == ["gone"]
    assert set(breakers.failing) == {"kept"}


def test_exit_reasons_name_signals() -> None:
    assert exit_reason(2) == "a worker exited with status 2 before serving"
    assert exit_reason(-15) == "a worker was killed by SIGTERM (-15) before serving"
    assert "signal 99" in exit_reason(-99)
    assert exit_reason(None) == "a worker exited before serving"
