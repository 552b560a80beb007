"""The gate every new group passes, for orphans and an operator's warm alike: invalid keys
are refused, known groups always admitted, new keys checked in order."""

from __future__ import annotations

from osrdyne import wire
from osrdyne.controller._decisions.gate import Gate, Refusal

NAMES = wire.PoolNames("p")


def test_keys_that_cannot_have_a_queue_are_refused_invalid_key() -> None:
    gate = Gate(NAMES, frozenset)
    for key in ("", "a\x1bb", "x" * 300, "new\nline"):
        refusal = gate.admit(key)
        assert refusal is not None and refusal.status is wire.Status.INVALID_KEY, key
    assert gate.admit("<script>alert(1)</script>") is None  # odd, but a valid key


def test_new_keys_pass_every_check_and_known_groups_none() -> None:
    groups: set[str] = set()  # the keys that have a group (the tracker's expected state)
    asked: list[str] = []
    full = Refusal(wire.Status.OVERLOADED, "the pool is full")

    def cap(key: str) -> Refusal | None:
        asked.append(key)
        return full if key != "small" else None

    gate = Gate(NAMES, lambda: groups, new_key=[cap])
    assert gate.admit("big") is full
    assert gate.admit("small") is None
    groups.add("big")  # e.g. adopted: a group that exists is never refused
    assert gate.admit("big") is None
    assert asked == ["big", "small"]
    assert gate.admit("bad\x00") is not None and asked == ["big", "small"]  # checked first
