"""The embedded default driver: each worker group is N local processes running a command.

Every worker is supervised: when it exits on its own it is restarted after an exponential
back-off (reset once it has run for a while), so a crash-looping group costs little and never
blocks other groups. Each worker carries its owner and slot in its environment
(`OSRDYNE_OWNER`, `OSRDYNE_SLOT`) from the moment it exists, so a controller that was killed and
restarted finds the workers that outlived it in /proc and adopts them instead of starting
duplicates (no pid file to write after the fork: no window where a worker is unknown).
`close()` stops every worker: SIGTERM, then SIGKILL after `stop_timeout`.

With `standby = N` the driver keeps N standby workers running ahead of demand (the `Standby`
protocol): `start(key)` gives the key to the oldest one that waits (the controller's
assignment message, docs/protocol.md) and starts a replacement; the standby becomes slot 0 of
the key's group, its other slots start as usual. A standby that exits is restarted as a
standby; once keyed, as a worker of its key. A restarted controller cannot read from /proc
which key a standby was given (its environment is the one it started with), so it stops the
workers that started as standbys (SIGTERM: they drain) and starts their groups anew.
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
import uuid
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
    standby: int = Field(
        default=0,
        ge=0,
        description="Standby workers kept running ahead of demand, not yet keyed: a new key "
        "takes one (and a replacement is started) instead of waiting for a process to start. "
        "Only for a command that supports the standby protocol (`worker_sdk` does; see "
        "docs/protocol.md); 0: each worker is started for its key. They count against "
        "`max_processes`.",
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
#: Set (to its standby id) on a worker started as a standby.
STANDBY_ENV = "OSRDYNE_STANDBY"


def _slot_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class _Group:
    """The supervised workers of one key, or a standby worker (`key` None) waiting for one."""

    def __init__(self, driver: SubprocessDriver, key: str | None) -> None:
        self.driver = driver
        self.key = key
        self.stopping = False
        #: Set while standby: the id naming its worker and standby queue.
        self.standby_id = uuid.uuid4().hex[:12] if key is None else None
        count = 1 if key is None else driver.settings.workers
        self.workers = [base.WorkerInfo(worker_id=self._worker_id(i)) for i in range(count)]
        self.tasks: list[asyncio.Task[None]] = []

    def _worker_id(self, slot: int) -> str:
        pool = self.driver.context.pool
        if self.key is None:
            return f"{pool}-standby-{self.standby_id}"
        return f"{pool}-{_slot_id(self.key)[:8]}-{slot}"

    @property
    def standby_queue(self) -> str:
        return self.driver.context.names.standby_queue(self.workers[0].worker_id)

    def start(self, adopted: dict[int, int]) -> None:
        for slot, pid in adopted.items():
            self.workers[slot].pid, self.workers[slot].adopted = pid, True
        for slot in range(len(self.workers)):
            self._supervise_slot(slot, adopted.get(slot))

    def _supervise_slot(self, slot: int, adopted_pid: int | None) -> None:
        task = asyncio.create_task(
            self._supervise(slot, adopted_pid), name=f"subprocess worker {self.key!r}#{slot}"
        )
        self.tasks.append(task)

    def assign(self, key: str) -> None:
        """This standby now serves `key` (it was told): slot 0 of the key's group; the other
        slots start now. Its restarts from now on are workers of the key."""
        self.key = key
        first = len(self.workers)
        self.workers += [
            base.WorkerInfo(worker_id=self._worker_id(i))
            for i in range(first, self.driver.settings.workers)
        ]
        for slot in range(first, len(self.workers)):
            self._supervise_slot(slot, None)

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
        context = self.driver.context
        if self.key is None:
            protocol = {
                **context.standby_environment(info.worker_id),
                STANDBY_ENV: str(self.standby_id),
            }
        else:
            protocol = context.environment(self.key, info.worker_id)
        env = {
            **os.environ,
            **s.env,
            **protocol,
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
        #: Standby workers by standby id, oldest first.
        self._standby: dict[str, _Group] = {}
        self._assign: base.Assign | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._adopted = False
        self._closed = False

    async def start(self, key: str) -> None:
        self._adopt_once()
        if key not in self._groups and not await self._take_standby(key):
            if key not in self._groups:  # not started meanwhile
                self._launch(key, {})
        self._replenish()

    async def stop(self, key: str) -> None:
        self._adopt_once()
        group = self._groups.pop(key, None)
        if group is not None:
            await group.stop()

    async def list(self) -> set[str]:
        self._adopt_once()
        self._replenish()
        return set(self._groups)

    async def close(self) -> None:
        self._closed = True
        groups = [*self._groups.values(), *self._standby.values()]
        self._groups, self._standby = {}, {}
        await asyncio.gather(*(g.stop() for g in groups), *self._retiring)

    def capacity(self) -> int:
        """Most groups at once (the `Capacity` protocol): `max_processes`, or the machine's
        memory over `memory_per_worker`, less the standby workers, divided by the workers of
        a group."""
        processes = self.settings.max_processes
        if processes is None:
            processes = machine_memory() // (self.settings.memory_per_worker * 2**20)
        return max(0, processes - self.settings.standby) // self.settings.workers

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The workers of each group (the `Describes` protocol)."""
        return {key: tuple(g.workers) for key, g in self._groups.items()}

    # -- standby workers (the `Standby` protocol) -----------------------------------------

    def standby_workers(self) -> tuple[base.WorkerInfo, ...]:
        return tuple(g.workers[0] for g in self._standby.values())

    def attach(self, assign: base.Assign | None) -> None:
        self._assign = assign

    async def _take_standby(self, key: str) -> bool:
        """Give `key` to the oldest standby that takes it; False when none did."""
        for group in list(self._standby.values()):
            assign = self._assign
            if assign is None or key in self._groups:
                return False
            if self._standby.pop(str(group.standby_id), None) is None:
                continue  # taken by another key meanwhile
            try:
                taken = await assign(group.standby_queue, key)
            except Exception as exc:  # the outcome is unknown: never let it serve twice
                logger.warning("assigning key %r to a standby worker failed: %s", key, exc)
                self._retire(group)
                continue
            if not taken:  # not waiting yet: keep it for a later key
                self._standby[str(group.standby_id)] = group
                continue
            if key in self._groups or self._closed:  # started another way meanwhile
                self._retire(group)
                return True
            logger.info("standby worker %s takes key %r", group.workers[0].worker_id, key)
            group.assign(key)
            self._groups[key] = group
            return True
        return False

    def _replenish(self) -> None:
        """Start standby workers until there are `standby` of them."""
        while not self._closed and len(self._standby) < self.settings.standby:
            group = _Group(self, None)
            self._standby[str(group.standby_id)] = group
            group.start({})

    def _retire(self, group: _Group) -> None:
        task = asyncio.create_task(group.stop(), name="retire a standby worker")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

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
            if STANDBY_ENV in env:
                _signal(pid, signal.SIGTERM)  # which key it was given, if any, is unknown
                continue
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
