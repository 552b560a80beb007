"""Which quorum request queues are judged leaderless, without a broker, on a fake clock
(`osrdyne.controller._decisions.leaderless`): suspected from a listing or a forward not
confirmed, looked at twice `leaderless_after` apart, a bounded number deleted per pass."""

from __future__ import annotations

from osrdyne.controller._decisions.leaderless import Suspects, Verdict, leaderless
from tests.control_loops.conftest import Clock

#: What the management API shows of a quorum queue with every member online and no leader
#: (no statistics), and of one with a leader.
NO_LEADER = {"members": ["a", "b"], "online": ["a", "b"]}
LED = {"members": ["a", "b"], "online": ["a", "b"], "messages": 0}


def test_a_queue_without_statistics_and_every_member_online_is_leaderless() -> None:
    assert leaderless(NO_LEADER)
    assert not leaderless(LED)
    assert not leaderless({"members": ["a", "b"], "online": ["a"]})  # a member down: not this
    assert not leaderless({"members": [], "online": []})
    assert not leaderless({"messages": 3})  # a classic queue
    assert not leaderless({"members": "a", "online": ["a"]})  # hostile figures


def test_a_listed_suspect_is_judged_at_its_second_look_after_the_delay(clock: Clock) -> None:
    suspects = Suspects(after=8, clock=clock)
    suspects.listed({"k": NO_LEADER, "fine": LED})
    assert "k" in suspects and "fine" not in suspects
    assert suspects.due() == [] and suspects.next_look() == 8  # the listing was its first look
    clock.advance(8)
    assert suspects.due() == ["k"] and suspects.next_look() == 0
    verdict = suspects.judge("k", NO_LEADER, wanted=True, may_delete=True)
    assert verdict is Verdict.LEADERLESS and "k" not in suspects
    assert suspects.next_look() is None


def test_a_forward_not_confirmed_is_looked_at_now_then_after_the_delay(clock: Clock) -> None:
    suspects = Suspects(after=8, clock=clock)
    assert suspects.suspect("k") and not suspects.suspect("k")  # new once
    assert suspects.due() == ["k"]
    assert suspects.judge("k", NO_LEADER, wanted=True, may_delete=True) is Verdict.WATCHED
    assert suspects.due() == []
    clock.advance(7.9)
    assert suspects.due() == []
    clock.advance(0.1)
    assert suspects.judge("k", NO_LEADER, wanted=True, may_delete=True) is Verdict.LEADERLESS


def test_a_suspect_with_a_leader_gone_or_unwanted_is_forgotten(clock: Clock) -> None:
    suspects = Suspects(after=8, clock=clock)
    for key in ("led", "gone", "unwanted"):
        suspects.suspect(key)
    assert suspects.judge("led", LED, wanted=True, may_delete=True) is Verdict.CLEARED
    assert suspects.judge("gone", None, wanted=True, may_delete=True) is Verdict.CLEARED
    assert suspects.judge("unwanted", NO_LEADER, wanted=False, may_delete=True) is Verdict.CLEARED
    assert len(suspects) == 0


def test_a_leaderless_queue_past_the_pass_s_deletions_stays_due(clock: Clock) -> None:
    suspects = Suspects(after=8, clock=clock)
    suspects.listed({"k": NO_LEADER})
    clock.advance(8)
    assert suspects.judge("k", NO_LEADER, wanted=True, may_delete=False) is Verdict.DEFERRED
    assert suspects.due() == ["k"]


def test_a_failed_look_keeps_the_suspect_as_it_was_due_later(clock: Clock) -> None:
    suspects = Suspects(after=8, clock=clock)
    suspects.listed({"k": NO_LEADER})
    first = suspects.get("k")
    clock.advance(8)
    suspects.retry("k", first, delay=2)
    assert suspects.get("k").first == first.first and suspects.next_look() == 2


def test_nothing_is_suspected_when_the_pool_does_not_look(clock: Clock) -> None:
    """`after` None: `queues.leaderless_after` unset, or classic queues."""
    suspects = Suspects(after=None, clock=clock)
    suspects.listed({"k": NO_LEADER})
    assert not suspects.suspect("j")
    assert len(suspects) == 0 and suspects.next_look() is None


def test_suspects_are_bounded(clock: Clock) -> None:
    suspects = Suspects(after=8, clock=clock, limit=3)
    suspects.listed({f"k{i}": NO_LEADER for i in range(5)})
    assert len(suspects) == 3 and not suspects.suspect("more")
