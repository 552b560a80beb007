"""The embedded default driver: each worker group is N local processes running a command.

Every worker is supervised: when it exits on its own it is restarted after an exponential
back-off (reset once it has run for a while), so a crash-looping group costs little and never
blocks other groups. Each worker carries its owner and slot in its environment
(`OSRDYNE_OWNER`, `OSRDYNE_SLOT`) from the moment it exists, so a controller that was killed and
restarted finds the workers that outlived it in /proc and adopts them instead of starting
duplicates (no pid file to write after the fork: no window where a worker is unknown).
`close()` stops every worker: SIGTERM, then SIGKILL after `stop_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from drivers import base

logger = logging.getLogger(__name__)


class SubprocessSettings(BaseModel):
    """Options of the subprocess driver (`[driver.subprocess]`)."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(
        default_factory=lambda: [sys.executable, "-m", "worker_sdk.examples.echo"],
        description="Command of a worker; the protocol's WORKER_* variables are added to "
        "its environment.",
    )
    workers: int = Field(default=1, ge=1, description="Worker processes per group.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for workers."
    )
    cwd: str | None = Field(default=None, description="Working directory of workers.")
    stop_timeout: float = Field(
        default=10.0, ge=0, description="Seconds between SIGTERM and SIGKILL when stopping."
    )
    restart_backoff: float = Field(
        default=0.5, gt=0, description="First delay before restarting a worker that exited."
    )
    restart_backoff_max: float = Field(
        default=30.0, gt=0, description="Longest delay between restarts of a crash-looping worker."
    )
    healthy_after: float = Field(
        default=30.0,
        gt=0,
        description="A worker that ran this many seconds resets its restart back-off.",
    )
    max_processes: int | None = Field(
        default=None,
        ge=1,
        description="Most worker processes at once, every group counted (a group is "
        "`workers` processes); new keys beyond it are answered `overloaded` (reason "
        "`driver_capacity`). None: as many as `memory_per_worker` fits in the machine's "
        "memory.",
    )
    memory_per_worker: int = Field(
        default=64,
        ge=1,
        description="Estimated resident memory of one worker, in MiB (the echo worker takes "
        "about 44): the machine's memory divided by it bounds the workers when "
        "`max_processes` is unset.",
    )
    owner: str | None = Field(
        default=None,
        description="Who the workers belong to (their OSRDYNE_OWNER): a restarted controller "
        "adopts the running workers of its owner. Default: `osrdyne:<pool>`, so the pool's "
        "controllers on this machine adopt each other's workers.",
    )


def machine_memory() -> int:
    """Bytes of physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


#: Environment variables marking a worker as the driver's: who owns it, which slot it fills.
OWNER_ENV = "OSRDYNE_OWNER"
SLOT_ENV = "OSRDYNE_SLOT"


def _slot_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class _Group:
    def __init__(self, driver: SubprocessDriver, key: str) -> None:
        self.driver = driver
        self.key = key
        self.stopping = False
        self.workers = [
            base.WorkerInfo(worker_id=f"{driver.context.pool}-{_slot_id(key)[:8]}-{i}")
            for i in range(driver.settings.workers)
        ]
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, adopted: dict[int, int]) -> None:
        for slot, pid in adopted.items():
            self.workers[slot].pid, self.workers[slot].adopted = pid, True
        for slot in range(len(self.workers)):
            task = asyncio.create_task(
                self._supervise(slot, adopted.get(slot)),
                name=f"subprocess worker {self.key!r}#{slot}",
            )
            self.tasks.append(task)

    async def _supervise(self, slot: int, adopted_pid: int | None) -> None:
        info = self.workers[slot]
        s = self.driver.settings
        backoff = s.restart_backoff
        if adopted_pid is not None:
            await self._wait_adopted(adopted_pid)
        while not self.stopping:
            started = time.monotonic()
            try:
                code = await self._run_once(slot, info)
            except OSError as exc:
                logger.error("cannot start worker for key %r: %s", self.key, exc)
                code = -1
            info.last_exit = code
            if self.stopping:
                break
            ran = time.monotonic() - started
            backoff = s.restart_backoff if ran >= s.healthy_after else backoff
            info.restarts += 1
            logger.warning(
                "worker %s of key %r exited with %s after %.1fs; restart in %.1fs",
                info.worker_id,
                self.key,
                code,
                ran,
                backoff,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, s.restart_backoff_max)

    async def _run_once(self, slot: int, info: base.WorkerInfo) -> int:
        s = self.driver.settings
        env = {
            **os.environ,
            **s.env,
            **self.driver.context.environment(self.key, info.worker_id),
            OWNER_ENV: self.driver.owner,
            SLOT_ENV: str(slot),
        }
        proc = await asyncio.create_subprocess_exec(
            *s.command, env=env, cwd=s.cwd, start_new_session=True
        )
        info.pid, info.adopted = proc.pid, False
        return await proc.wait()

    async def _wait_adopted(self, pid: int) -> None:
        while not self.stopping and _alive(pid):
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        self.stopping = True
        pids = [w.pid for w in self.workers if w.pid is not None]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.driver.settings.stop_timeout
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            await asyncio.sleep(0.05)
        for pid in pids:
            if _alive(pid):
                logger.warning("worker pid %d of key %r ignored SIGTERM: killing", pid, self.key)
                _signal(pid, signal.SIGKILL)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie child counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    # A zombie has exited; it is reaped by its parent (asyncio's child watcher for ours:
    # reaping it here would steal its exit status).
    return state != "Z"


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


class SubprocessDriver:
    """Runs worker groups as supervised local processes."""

    def __init__(self, context: base.PoolContext, settings: SubprocessSettings) -> None:
        self.context = context
        self.settings = settings
        self.owner = settings.owner or f"osrdyne:{context.pool}"
        self._groups: dict[str, _Group] = {}
        self._adopted = False

    async def start(self, key: str) -> None:
        self._adopt_once()
        if key not in self._groups:
            self._launch(key, {})

    async def stop(self, key: str) -> None:
        self._adopt_once()
        group = self._groups.pop(key, None)
        if group is not None:
            await group.stop()

    async def list(self) -> set[str]:
        self._adopt_once()
        return set(self._groups)

    async def close(self) -> None:
        groups, self._groups = list(self._groups.values()), {}
        await asyncio.gather(*(g.stop() for g in groups))

    def capacity(self) -> int:
        """Most groups at once (the `Capacity` protocol): `max_processes`, or the machine's
        memory over `memory_per_worker`, divided by the workers of a group."""
        processes = self.settings.max_processes
        if processes is None:
            processes = machine_memory() // (self.settings.memory_per_worker * 2**20)
        return max(0, processes) // self.settings.workers

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The workers of each group (the `Describes` protocol)."""
        return {key: tuple(g.workers) for key, g in self._groups.items()}

    def _launch(self, key: str, adopted: dict[int, int]) -> None:
        group = _Group(self, key)
        self._groups[key] = group
        group.start(adopted)

    # -- adoption -------------------------------------------------------------------------

    def _adopt_once(self) -> None:
        """Adopt workers a previous controller of this owner left running (first call only)."""
        if self._adopted:
            return
        self._adopted = True
        found: dict[str, dict[int, int]] = {}
        for pid, env in _processes_of(self.owner, self.context.pool):
            key, slot = env.get("WORKER_KEY"), env.get(SLOT_ENV, "")
            if key is None or not slot.isdigit():
                continue
            if int(slot) >= self.settings.workers or int(slot) in found.get(key, {}):
                _signal(pid, signal.SIGTERM)  # the group shrank, or a stray duplicate
                continue
            found.setdefault(key, {})[int(slot)] = pid
        for key, slots in found.items():
            logger.info("adopting %d running worker(s) of key %r", len(slots), key)
            self._launch(key, slots)


def _processes_of(owner: str, pool: str) -> list[tuple[int, dict[str, str]]]:
    """Live processes whose environment says they are workers of `owner` in `pool`."""
    marker = f"{OWNER_ENV}={owner}".encode()
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
        if env.get("WORKER_POOL") == pool and _alive(int(entry.name)):
            found.append((int(entry.name), env))
    return found
