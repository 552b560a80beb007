"""The labels of a docker worker container (the engine is the driver's only state), and
its index in its group."""

from __future__ import annotations

from typing import Any

LABEL_POOL = "osrdyne.pool"
LABEL_KEY = "osrdyne.key"
LABEL_WORKER_ID = "osrdyne.worker-id"
LABEL_INDEX = "osrdyne.index"
LABEL_VERSION = "osrdyne.version"
#: On a standby container instead of LABEL_KEY: its standby id.
LABEL_STANDBY = "osrdyne.standby"


def index(container: dict[str, Any]) -> int:
    """The container's index in its group (-1: none, or not a number)."""
    try:
        return int(container["Labels"].get(LABEL_INDEX, "-1"))
    except ValueError:
        return -1
