"""Fixtures of the bounds tests: the control loops' fake clock, for the pure ones."""

from __future__ import annotations

from tests.control_loops.conftest import clock

__all__ = ["clock"]
