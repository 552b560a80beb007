"""Worker groups as Docker containers: N labelled containers per worker key.

The engine is the only state: containers carry the labels `osrdyne.pool`, `osrdyne.key`,
`osrdyne.worker-id`, `osrdyne.index` and `osrdyne.version`, so a controller that restarts
adopts the containers it finds, and so does a standby taking over. Containers are named by
`drivers.names.object_name` (a readable prefix and a hash of the exact key). The version label
is a hash of everything that shapes a container (image, command, environment, mounts, limits,
...): a group whose version is not the current one is replaced container by container (stop
and remove one, create its successor, next), on `start` and whenever `list` sees it. The
request queue is never touched, so requests wait there during a replacement.

With `standby = N` the driver keeps N standby containers, started ahead of demand and not yet
keyed (label `osrdyne.standby` instead of `osrdyne.key`, restart policy `no`). `start(key)`
gives the key to one through the controller's assignment (docs/protocol.md) and starts a
replacement. A group that grows (`resize`) takes the waiting standbys the same way, as its
new indexes, before it creates containers. A label cannot change on a running container, so
the driver records which key and index each assigned standby serves and lists it so in that
key's group, and renames it to the name that index would have (`docker rename`): a
restarted controller, which has no record, tells an assigned standby (renamed) from a waiting
one (still under its standby name), and stops the former, whose key it cannot know, as the
subprocess driver does. A standby that exits is removed and replaced; an assigned one that
exits is replaced by a keyed container.

A group's size changes while it runs (the `Sizes` protocol, for the controller's group
scaler): `resize(key, n)` creates the missing indexes or removes the highest ones (`docker
stop`: SIGTERM, the worker drains, SIGKILL after `stop_timeout`); a group grows only into the
room `max_containers` leaves, and containers beyond a group's `workers` count against the
capacity offered to new keys. The size is kept in memory; a restarted controller adopts a
group of this version with contiguous indexes at the size it finds.

`describe()` (the `Describes` protocol) gives each group's containers as the last `list()`
saw them; the restarts and last exit status of a container that is not running (restarting
after a crash, exited) are read from the engine (`inspect`) at that listing, and kept while it
runs: a crash-looping group is seen without inspecting every healthy container on each pass.

The Docker SDK is blocking and imported lazily: this module (and its settings model) can be
imported without it; every SDK call runs in a thread.
"""

from drivers.docker._driver import DockerDriver
from drivers.docker._labels import (
    LABEL_INDEX,
    LABEL_KEY,
    LABEL_POOL,
    LABEL_STANDBY,
    LABEL_VERSION,
    LABEL_WORKER_ID,
)
from drivers.docker._settings import DockerSettings, VolumeMount

__all__ = [
    "LABEL_INDEX",
    "LABEL_KEY",
    "LABEL_POOL",
    "LABEL_STANDBY",
    "LABEL_VERSION",
    "LABEL_WORKER_ID",
    "DockerDriver",
    "DockerSettings",
    "VolumeMount",
]
