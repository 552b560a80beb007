"""Worker-group drivers: start, stop and list the worker groups of a pool.

Each driver is a module of its own with its settings model; they never import each other.
"""

from drivers.base import Driver, DriverError, DriverRejected, DriverUnavailable, PoolContext

__all__ = ["Driver", "DriverError", "DriverRejected", "DriverUnavailable", "PoolContext"]
