"""A fake clock for the control loops' unit tests: time is a parameter, never slept."""

from __future__ import annotations

import pytest


class Clock:
    """`time.monotonic` stand-in that only moves when a test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()
