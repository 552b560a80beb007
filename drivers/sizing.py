"""How many worker groups a driver can run, and how far a group may grow: the arithmetic every
driver with a cap on its workers shares, pure (no I/O, no clock of its own).

A group runs `workers` workers unless the controller's group scaler resized it (`base.Sizes`).
Capacity offered to new keys is what the cap leaves once the standby workers and the workers
groups run beyond their `workers` are counted (`capacity`); a group grows only into the room
the cap leaves, and shrinks whatever the cap (`clamp`). `GroupSizes` is the bookkeeping of a
driver that lists its groups from an engine (docker, systemd): the size each listed group is
asked to have, which groups may be resized, and what a listing means for them (`plan`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import overload

#: What a listing found of one group: (index, current) for each of its workers, where `index`
#: is its place in the group (0 to size - 1) and `current` whether it runs this version (and
#: is not failed for long). Two workers of one index are a half-done replacement.
Found = Sequence[tuple[int, bool]]


@overload
def capacity(*, cap: int, workers: int, standby: int = ..., sizes: Iterable[int]) -> int: ...
@overload
def capacity(
    *, cap: int | None, workers: int, standby: int = ..., sizes: Iterable[int]
) -> int | None: ...
def capacity(
    *, cap: int | None, workers: int, standby: int = 0, sizes: Iterable[int]
) -> int | None:
    """Most groups of `workers` workers that fit under `cap` beside the running ones:
    `(cap - standby - extras) // workers`, `extras` being the workers the groups of `sizes`
    run beyond `workers`; never negative. None: no cap, no limit known."""
    if workers < 1:
        raise ValueError(f"a group runs at least one worker, not {workers}")
    if cap is None:
        return None
    extras = sum(max(0, n - workers) for n in sizes)
    return max(0, cap - standby - extras) // workers


def clamp(*, current: int, wanted: int, cap: int | None = None, used: int = 0) -> int:
    """The size a group of `current` workers gets when asked for `wanted`: at least 1; growth
    only into the room `cap` leaves once `used` workers (every group's, standby ones
    included) are counted, none when the cap is reached or passed; a shrink always."""
    count = max(1, wanted)
    if count > current and cap is not None:
        count = current + min(count - current, max(0, cap - used))
    return count


def whole(found: Found, size: int) -> bool:
    """Whether a group's workers are exactly indexes 0 to `size - 1`, each current."""
    return all(current for _, current in found) and sorted(i for i, _ in found) == list(range(size))


def plan(
    groups: Mapping[str, Found], sizes: Mapping[str, int], workers: int
) -> tuple[dict[str, int], set[str]]:
    """What a listing means for the groups' sizes, from what it found of each group and the
    sizes asked so far: the sizes of the listed groups (a grown group nobody sized, e.g.
    before a controller restart, adopted at its size when it is whole), and the groups
    `start` must converge (a worker of another version, or not exactly indexes 0 to
    size - 1: a half-done replacement or resize)."""
    planned = {key: n for key, n in sizes.items() if key in groups}
    for key, found in groups.items():
        if key not in planned and len(found) > workers and whole(found, len(found)):
            planned[key] = len(found)
    outdated = {key for key, found in groups.items() if not whole(found, planned.get(key, workers))}
    return planned, outdated


class GroupSizes:
    """The size each listed group of a driver is asked to have: `workers` unless resized (or
    adopted grown), and which groups may be resized: those the last listing found and not
    stopped since. Times are the caller's (monotonic seconds): a listing that began before a
    key's stop does not make it resizable again (a late resize would start it anew)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a group runs at least one worker, not {workers}")
        self.workers = workers
        self._asked: dict[str, int] = {}
        self._listed: set[str] = set()
        self._stopped: dict[str, float] = {}

    def of(self, key: str) -> int:
        """The workers the group of `key` is asked to have."""
        return self._asked.get(key, self.workers)

    def listed(self, key: str) -> bool:
        """Whether the last listing found the group of `key`, not stopped since."""
        return key in self._listed

    def sizes(self) -> dict[str, int]:
        """The size of each listed group (`base.Sizes.sizes`)."""
        return {key: self.of(key) for key in self._listed}

    def capacity(self, cap: int | None, *, standby: int = 0) -> int | None:
        """Most groups more that fit under `cap` (`capacity`, over the listed groups)."""
        return capacity(cap=cap, workers=self.workers, standby=standby, sizes=self.sizes().values())

    def clamp(self, key: str, wanted: int, cap: int | None, *, standby: int = 0) -> int:
        """The size the group of `key` gets when asked for `wanted` (`clamp`: every listed
        group's workers and the `standby` ones used)."""
        used = sum(self.sizes().values()) + standby
        return clamp(current=self.of(key), wanted=wanted, cap=cap, used=used)

    def ask(self, key: str, count: int) -> None:
        """The group of `key` is to run `count` workers from now on."""
        self._asked[key] = count

    def forget(self, key: str) -> None:
        """Back to `workers` for `key` (a resize that did not happen)."""
        self._asked.pop(key, None)

    def stopped(self, key: str, *, at: float) -> None:
        """The group of `key` is being stopped at `at`: no size, and no resize of it until a
        listing begun later finds it again."""
        self._asked.pop(key, None)
        self._listed.discard(key)
        self._stopped[key] = at

    def listing(self, groups: Mapping[str, Found], *, began: float) -> set[str]:
        """Take in a listing begun at `began` (`plan`); the groups `start` must converge."""
        self._stopped = {k: at for k, at in self._stopped.items() if at >= began}
        self._listed = set(groups) - set(self._stopped)
        self._asked, outdated = plan(groups, self._asked, self.workers)
        return outdated
