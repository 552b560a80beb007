"""The keys' history: bounded in keys, events and dead letters whatever clients send, and the
cold start of a group measured from its require to its first `ready`."""

from __future__ import annotations

from osrdyne.controller._decisions.history import MAX_TEXT, DeadLetter, EventKind, KeyHistory
from tests.control_loops.conftest import Clock


def letter(reason: str = "expired", correlation_id: str | None = "c") -> DeadLetter:
    return DeadLetter(
        time=0.0, reason=reason, correlation_id=correlation_id, deaths=1, answered=True
    )


def test_the_key_quiet_for_longest_is_forgotten_first(clock: Clock) -> None:
    history = KeyHistory(max_keys=3, clock=clock)
    for key in ("a", "b", "c"):
        history.record(key, EventKind.REQUIRED)
    history.record("a", EventKind.UNBOUND)  # a is fresh again: b is now the oldest
    history.record("d", EventKind.REQUIRED)
    assert len(history) == 3
    assert "b" not in history and {"a", "c", "d"} <= {k for k in "abcd" if k in history}
    assert history.events("b") == [] and history.since("b") is None


def test_events_dead_letters_and_texts_are_bounded(clock: Clock) -> None:
    history = KeyHistory(max_events=4, max_dead_letters=2, clock=clock)
    for n in range(10):
        history.record("k", EventKind.WORKER_STARTED, f"worker {n}")
        history.dead_letter("k", letter(reason=f"r{n}"))
    assert [e.detail for e in history.events("k")] == [f"worker {n}" for n in range(6, 10)]
    assert [d.reason for d in history.dead_letters("k")] == ["r8", "r9"]
    history.record("k", EventKind.DRIVER_ERROR, "x" * 10_000)
    history.dead_letter("k", letter(reason="y" * 10_000, correlation_id="z" * 10_000))
    assert len(history.events("k")[-1].detail) == MAX_TEXT
    last = history.dead_letters("k")[-1]
    assert len(last.reason) == MAX_TEXT and last.correlation_id == "z" * MAX_TEXT


def test_since_follows_state_changes_only(clock: Clock) -> None:
    history = KeyHistory(clock=clock)
    history.record("k", EventKind.REQUIRED)
    required_at = clock.now
    clock.advance(3)
    history.record("k", EventKind.GROUP_STARTED)
    history.worker_ready("k", "w1")
    assert history.since("k") == required_at
    history.record("k", EventKind.UNBOUND)
    assert history.since("k") == clock.now


def test_the_first_ready_after_a_require_ends_the_cold_start(clock: Clock) -> None:
    history = KeyHistory(clock=clock, monotonic=clock)
    history.worker_ready("k", "w0")  # adopted group: no cold start to measure
    assert history.cold_start("k") is None
    history.record("k", EventKind.REQUIRED)
    clock.advance(2.5)
    history.worker_ready("k", "w1")
    clock.advance(1)
    history.worker_ready("k", "w2")  # a second worker, or a restart: not a cold start
    assert history.cold_start("k") == 2.5
    kinds = [e.kind for e in history.events("k")]
    assert kinds == [
        EventKind.WORKER_READY,
        EventKind.REQUIRED,
        EventKind.FIRST_READY,
        EventKind.WORKER_READY,
    ]
    assert "cold start 2.50s" in history.events("k")[2].detail
