"""What `describe()` says of a docker group's containers: the restarts and last exit status
of a container that is not running (restarting after a crash, exited) are read from the
engine (`inspect`) when a listing sees it so, and kept while it runs: a crash-looping group is
seen without inspecting every healthy container on each pass."""

from __future__ import annotations

import contextlib
import re
from typing import Any

from drivers import base
from drivers.docker._labels import LABEL_WORKER_ID, index

#: States whose `ExitCode` is the last exit's.
_EXITED = frozenset({"exited", "restarting", "dead"})
#: The last exit status in the list API's `Status` of a container that is not running.
_EXIT_STATUS = re.compile(r"^(?:Restarting|Exited) \((-?\d+)\)")

#: Restarts and last exit of each container, by id, as last inspected.
Exits = dict[str, tuple[int, int | None]]


def workers_of(
    engine: Any, groups: dict[str, list[dict[str, Any]]], known: Exits
) -> tuple[dict[str, tuple[base.WorkerInfo, ...]], Exits]:
    """Each group's containers as workers, and the exits now known (blocking: a thread)."""
    import docker.errors

    exits: Exits = {}
    described: dict[str, tuple[base.WorkerInfo, ...]] = {}
    for key, containers in groups.items():
        workers = []
        for c in sorted(containers, key=index):
            restarts, last_exit = known.get(c["Id"], (0, None))
            said = _EXIT_STATUS.match(str(c.get("Status") or ""))
            if said is not None:  # the listing says it: `Restarting (3) 1 second ago`
                last_exit = int(said.group(1))
            if c.get("State") != "running":
                with contextlib.suppress(docker.errors.NotFound):
                    found = engine.api.inspect_container(c["Id"])
                    restarts = int(found.get("RestartCount") or 0)
                    state = found.get("State") or {}
                    code = state.get("ExitCode")
                    # Once restarted (running again by now) the engine says 0.
                    if isinstance(code, int) and state.get("Status") in _EXITED and not said:
                        last_exit = code
            exits[c["Id"]] = (restarts, last_exit)
            name = (c.get("Names") or ["/"])[0].lstrip("/")
            worker_id = (c.get("Labels") or {}).get(LABEL_WORKER_ID) or name
            workers.append(
                base.WorkerInfo(
                    worker_id=worker_id, name=name, restarts=restarts, last_exit=last_exit
                )
            )
        described[key] = tuple(workers)
    return described, exits
