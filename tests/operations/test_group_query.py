"""`GroupQuery.select`, the order and filters of `/status` (and of the console's table), on
plain values: each sort's natural direction, `descending`, groups without a value last."""

from __future__ import annotations

from osrdyne.controller import GroupQuery, GroupSort, GroupState, Health

STATES = {
    "a": GroupState.ACTIVE,
    "B": GroupState.UNBOUND,
    "c": GroupState.ACTIVE,
    "d": GroupState.STOPPING,
}
MESSAGES = {"a": 3, "B": 0, "c": 3}  # `d` has no queue figures
ERRORS = {"c": "boom", "d": "another"}


def select(**query: object) -> tuple[list[str], int]:
    def value(sort: GroupSort, key: str) -> float | str | None:
        if sort is GroupSort.MESSAGES:
            return MESSAGES.get(key)
        if sort is GroupSort.ERROR:
            return ERRORS.get(key)
        return STATES[key].value

    def health(key: str) -> Health | None:
        return None if key not in MESSAGES else Health.STALLED if key == "c" else Health.OK

    return GroupQuery.model_validate(query).select(STATES, value=value, health=health)


def test_numbers_come_largest_first_ties_by_key_either_way_and_the_unknown_last() -> None:
    assert select(sort="messages") == (["a", "c", "B", "d"], 4)
    assert select(sort="messages", descending=True) == (["B", "a", "c", "d"], 4)


def test_text_comes_in_order_and_groups_without_an_error_last() -> None:
    assert select(sort="error") == (["d", "c", "B", "a"], 4)
    assert select(sort="state")[0] == ["a", "c", "d", "B"]
    assert select(sort="key", descending=True)[0] == ["d", "c", "a", "B"]


def test_filters_pages_and_counts() -> None:
    assert select(key="b") == (["B"], 1)  # whatever its case
    assert select(key="b", exact=True) == ([], 0)
    assert select(key="B", exact=True) == (["B"], 1)
    assert select(state="active") == (["a", "c"], 2)
    assert select(health="stalled") == (["c"], 1)
    assert select(health="ok") == (["B", "a"], 2)
    assert select(limit=2, offset=1) == (["a", "c"], 4)
    assert select(limit=0) == ([], 4)
