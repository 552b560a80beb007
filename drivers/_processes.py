"""Local processes as the subprocess driver sees them: the machine's memory, whether a
process runs, its signals, waiting for processes to end, and finding the workers of an owner
in /proc (their environment says whose they are)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path


def machine_memory() -> int:
    """Bytes of physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


#: A SIGKILLed process is gone within this bound (it cannot refuse; a process in
#: uninterruptible sleep takes its time).
KILLED_WITHIN = 5.0


async def ended(pids: list[int], within: float) -> bool:
    """Wait up to `within` seconds for every process of `pids` to end; True when they did."""
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie child counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    # A zombie has exited; it is reaped by its parent (asyncio's child watcher for ours:
    # reaping it here would steal its exit status).
    return state != "Z"


def send(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to `pid`; a process gone (or not ours to signal) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def workers_of(owner: str, pool: str, *, owner_env: str) -> list[tuple[int, dict[str, str]]]:
    """Live processes whose environment says they are workers of `owner` in `pool`."""
    marker = f"{owner_env}={owner}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker not in raw.split(b"\0"):
            continue
        env = dict(
            item.decode(errors="surrogateescape").split("=", 1)
            for item in raw.split(b"\0")
            if b"=" in item
        )
        if env.get("WORKER_POOL") == pool and alive(int(entry.name)):
            found.append((int(entry.name), env))
    return found
