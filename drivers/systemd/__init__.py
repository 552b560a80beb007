"""Worker groups as instances of a systemd template unit, driven through systemd's D-Bus API.

One room per seam:

    _names         instance names of a pool's units (`systemd-escape`'s rules, hashed forms,
                   replicas)
    _unit_names    one pool's units by name: unit, file and worker id of each replica of a
                   key, and the key and replica a listed unit stands for
    _environment   the per-instance environment files: format, values systemd keeps, writing
    _settings      `[driver.systemd]` (imports without dbus-fast)
    _bus           the D-Bus connection, calls and unit signals; D-Bus errors translated
    _units         the pool's units as systemd reports them (listing, states, stops awaited)
    _workers       each group's workers as listings and signals report them (`describe`)
    _driver        `SystemdDriver`: the Driver protocol over units, files and the bus
"""

from drivers.systemd._driver import SystemdDriver
from drivers.systemd._environment import VERSION_ENV
from drivers.systemd._names import (
    HASH_DIGITS,
    HASH_MARK,
    MAX_UNIT_NAME,
    escape,
    file_stem,
    instance_name,
    key_hash,
    unescape,
)
from drivers.systemd._settings import SystemdSettings

__all__ = [
    "HASH_DIGITS",
    "HASH_MARK",
    "MAX_UNIT_NAME",
    "VERSION_ENV",
    "SystemdDriver",
    "SystemdSettings",
    "escape",
    "file_stem",
    "instance_name",
    "key_hash",
    "unescape",
]
