"""The sizing shared by the drivers (`drivers.sizing`): capacity offered to new keys, how far a
group may grow, and what a listing means for the groups' sizes. Pure: plain inputs, no I/O."""

from __future__ import annotations

import pytest

from drivers import sizing

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("cap", "workers", "standby", "sizes", "expected"),
    [
        (None, 1, 0, [], None),  # no cap: no limit known
        (None, 2, 3, [9], None),
        (10, 1, 0, [], 10),  # nothing runs yet
        (10, 2, 0, [], 5),
        (7, 2, 0, [2, 2], 3),  # groups at `workers` take nothing from what is offered
        (10, 2, 2, [], 4),  # standby workers count against the cap
        (10, 2, 0, [4, 2], 4),  # a group grown by 2 takes one group's room
        (10, 3, 0, [], 3),  # rounded down: a group is whole or not at all
        (4, 2, 0, [4, 2], 1),  # the cap reached by grown groups: what is left
        (4, 1, 0, [3, 3], 0),  # the cap passed (a smaller cap after a restart): none, not < 0
        (2, 1, 5, [], 0),  # standby larger than the cap: none
        (0, 1, 0, [], 0),
    ],
)
def test_capacity_is_what_the_cap_leaves_over_the_workers_of_a_group(
    cap: int | None, workers: int, standby: int, sizes: list[int], expected: int | None
) -> None:
    found = sizing.capacity(cap=cap, workers=workers, standby=standby, sizes=sizes)
    assert found == expected


@pytest.mark.parametrize("workers", [0, -1])
def test_a_group_of_no_worker_is_refused(workers: int) -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        sizing.capacity(cap=10, workers=workers, sizes=[])
    with pytest.raises(ValueError, match="at least one worker"):
        sizing.GroupSizes(workers)


@pytest.mark.parametrize(
    ("current", "wanted", "cap", "used", "expected"),
    [
        (2, 5, None, 100, 5),  # no cap: as asked
        (2, 5, 10, 4, 5),  # room for it
        (2, 5, 10, 8, 4),  # grows into the room left only
        (2, 5, 10, 10, 2),  # the cap reached: no growth
        (2, 5, 10, 13, 2),  # the cap passed (standby larger than the cap): no growth, no shrink
        (4, 1, 2, 10, 1),  # a shrink whatever the cap
        (3, 0, None, 0, 1),  # at least one worker
        (3, -4, 10, 0, 1),
        (1, 0, 1, 5, 1),
        (3, 3, 0, 9, 3),  # unchanged
    ],
)
def test_a_group_grows_only_into_the_room_the_cap_leaves(
    current: int, wanted: int, cap: int | None, used: int, expected: int
) -> None:
    assert sizing.clamp(current=current, wanted=wanted, cap=cap, used=used) == expected


@pytest.mark.parametrize(
    ("groups", "sizes", "planned", "outdated"),
    [
        # Each group at `workers` (2), current: nothing to do (groups: replica -> current).
        ({"a": {0: True, 1: True}}, {}, {}, set()),
        # Asked for 3, two running: the third to start. Asked sizes of unlisted groups go.
        ({"a": {0: True, 1: True}}, {"a": 3, "gone": 4}, {"a": 3}, {"a"}),
        # Shrunk to 1, replica 1 still stopping: converge (stop it).
        ({"a": {0: True, 1: True}}, {"a": 1}, {"a": 1}, {"a"}),
        # A grown group nobody sized (a restarted controller): adopted at its size.
        ({"a": {0: True, 1: True, 2: True, 3: True}}, {}, {"a": 4}, set()),
        # Grown but with a gap, or a unit of another version: back to `workers`.
        ({"a": {0: True, 1: True, 3: True}}, {}, {}, {"a"}),
        ({"a": {0: True, 1: True, 2: False}}, {}, {}, {"a"}),
        # A unit of another version (or failed long enough) in a sized group.
        ({"a": {0: False, 1: True}}, {"a": 2}, {"a": 2}, {"a"}),
        # Replica 0 gone (stopped by hand): started again.
        ({"a": {1: True}}, {}, {}, {"a"}),
    ],
)
def test_a_listing_plans_sizes_and_the_groups_to_converge(
    groups: dict[str, dict[int, bool]],
    sizes: dict[str, int],
    planned: dict[str, int],
    outdated: set[str],
) -> None:
    found = {key: list(replicas.items()) for key, replicas in groups.items()}
    assert sizing.plan(found, sizes, workers=2) == (planned, outdated)


def test_group_sizes_follow_resizes_stops_and_listings() -> None:
    sizes = sizing.GroupSizes(2)
    assert sizes.listing({"a": [(0, True), (1, True)], "b": [(0, True), (1, True)]}, began=1.0) == (
        set()
    )
    assert sizes.listed("a") and sizes.sizes() == {"a": 2, "b": 2}
    # Growth into what max (10) leaves beside the listed groups (4) and 2 standby: 4 more.
    assert sizes.clamp("a", 9, 10, standby=2) == 6
    sizes.ask("a", 6)
    assert sizes.of("a") == 6 and sizes.sizes() == {"a": 6, "b": 2}
    assert sizes.capacity(10, standby=2) == 2  # (10 - 2 standby - 4 beyond `workers`) // 2
    # A stop: no size, not resizable, until a listing begun after it finds the group again.
    sizes.stopped("a", at=5.0)
    assert not sizes.listed("a") and sizes.of("a") == 2
    assert sizes.listing({"a": [(0, True), (1, True)]}, began=4.0) == set()
    assert not sizes.listed("a")  # that listing began before the stop
    sizes.listing({"a": [(0, True), (1, True)]}, began=6.0)
    assert sizes.listed("a") and not sizes.listed("b")  # b is gone
    sizes.ask("a", 3)
    sizes.forget("a")
    assert sizes.of("a") == 2


def test_capacity_of_group_sizes_counts_only_the_listed_groups() -> None:
    sizes = sizing.GroupSizes(1)
    sizes.listing({"a": [(0, True), (1, True), (2, True)]}, began=0.0)  # adopted at 3
    assert sizes.sizes() == {"a": 3}
    assert sizes.capacity(5) == 3  # 5 less the 2 extras
    assert sizes.capacity(None) is None
    sizes.stopped("a", at=1.0)
    assert sizes.capacity(5) == 5


def test_two_workers_of_one_index_are_a_half_done_replacement() -> None:
    assert not sizing.whole([(0, True), (0, True)], 2)
    assert not sizing.whole([(0, True), (0, True), (1, True)], 2)
    assert sizing.whole([(1, True), (0, True)], 2)
    assert sizing.whole([], 0)
