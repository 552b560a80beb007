"""The per-instance environment files of the units: their format, and writing them safely.

The worker's environment (the protocol's `WORKER_*`, `environment`, and the driver's version)
reaches the unit through that file, written by the driver (mode 0600, atomically) before each
start and removed after the unit stops; never `systemctl set-environment`, which every unit
would see. Values are double-quoted as systemd's own EnvironmentFile= parser reads them back.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from drivers import base

#: The variable of the environment file naming the driver's version of the group.
VERSION_ENV = "OSRDYNE_WORKER_VERSION"

# C0 controls and DEL: systemd drops an environment value holding one (tab and newline it
# keeps, but osrdyne's own values never need them).
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_LINE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\["\\$`])*)"$')


def value_problem(text: str) -> str | None:
    """Why systemd would drop `text` as an environment value, or None."""
    if CONTROL.search(text):
        return "holds a control character"
    try:
        text.encode()
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    for char in text:
        point = ord(char)
        if 0xFDD0 <= point <= 0xFDEF or (point & 0xFFFE) == 0xFFFE:
            return "holds a Unicode noncharacter, which systemd refuses"
    if len(text.encode()) > 65536:
        return "is longer than 64 KiB"
    return None


def quote(text: str) -> str:
    """`text` as a double-quoted EnvironmentFile value (systemd's own parser reads it back)."""
    return '"' + re.sub(r'(["\\$`])', r"\\\1", text) + '"'


def read_environment(path: Path) -> dict[str, str] | None:
    """The variables of one of the driver's environment files, or None when unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found: dict[str, str] = {}
    for line in lines:
        match = _ENV_LINE.match(line)
        if match:
            found[match[1]] = re.sub(r"\\(.)", r"\1", match[2])
    return found


def write(directory: Path, target: Path, variables: dict[str, str]) -> None:
    """Write `variables` to `target` in `directory`: 0600, whole or not at all."""
    for name, value in variables.items():
        problem = value_problem(value)
        if problem is not None:
            raise base.DriverRejected(f"the worker's {name} {problem}")
    body = "".join(f"{name}={quote(value)}\n" for name, value in variables.items())
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = directory.stat()
    if found.st_mode & 0o022 or found.st_uid not in (os.geteuid(), 0):
        # Whoever may write there could swap a unit's file, hence its environment.
        raise base.DriverRejected(
            f"{directory} must be owned by the controller's user (or root) and "
            f"writable by it alone (mode {found.st_mode & 0o777:o}, owner uid "
            f"{found.st_uid})"
        )
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
