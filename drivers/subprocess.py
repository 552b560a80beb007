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
the key's group, its other slots start as usual. A group that grows (`resize`) takes the
standby workers that wait the same way, as its next slots, before it starts processes: scale-out
then costs an assignment, not a worker's start-up. A standby that exits is restarted as a
standby; once keyed, as a worker of its key. A restarted controller cannot read from /proc
which key a standby was given (its environment is the one it started with), so it stops the
workers that started as standbys (SIGTERM: they drain) and starts their groups anew.

A group's size changes while it runs (the `Sizes` protocol: the controller's group scaler
calls `resize(key, n)`): new slots start at once; the highest slots leave by SIGTERM, so their
workers stop taking requests and finish what they hold (what they had not started returns to
the queue), SIGKILL only after `stop_timeout`. A group grows only into the processes the cap
leaves (`max_processes`, or memory), and the workers beyond each group's `workers` count
against the `Capacity` offered to new keys. A restarted controller adopts the first `workers`
slots of each group; the others drain, and the scaler grows the group again if it needs them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import sys
import time
import uuid

from pydantic import BaseModel, ConfigDict, Field

from drivers import _processes, base, sizing, standby

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
        #: The supervision task of each slot in `workers`.
        self._slot_tasks: dict[int, asyncio.Task[None]] = {}
        #: Workers taken away by a resize (ids of their `WorkerInfo`): not restarted.
        self._retired: set[int] = set()
        #: Their stops in progress.
        self.leaving: set[asyncio.Task[None]] = set()
        self._stopped: asyncio.Task[None] | None = None

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
        self._slot_tasks[slot] = task

    def resize(self, count: int) -> None:
        """Run `count` workers: start the new slots, drain the highest ones away."""
        if self.stopping or self.key is None:
            return
        first = len(self.workers)
        if count > first:
            self.workers += [
                base.WorkerInfo(worker_id=self._worker_id(i)) for i in range(first, count)
            ]
            for slot in range(first, count):
                self._supervise_slot(slot, None)
            return
        leaving, self.workers = self.workers[count:], self.workers[:count]
        for slot, info in enumerate(leaving, start=count):
            self._retired.add(id(info))
            task = asyncio.create_task(
                self._leave(info, self._slot_tasks.pop(slot)),
                name=f"subprocess worker {info.worker_id} leaving",
            )
            self.leaving.add(task)
            task.add_done_callback(self.leaving.discard)

    async def _leave(self, info: base.WorkerInfo, supervision: asyncio.Task[None]) -> None:
        """Drain one worker away: SIGTERM (it finishes what it holds), SIGKILL after
        `stop_timeout`, then end its supervision."""
        deadline = time.monotonic() + _processes.KILLED_WITHIN
        while info.pid is None and not supervision.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # its process is being started: wait for its pid
        pid = info.pid
        if pid is not None:
            _processes.send(pid, signal.SIGTERM)
            if not await _processes.ended([pid], self.driver.settings.stop_timeout):
                logger.warning("worker pid %d of key %r ignored SIGTERM: killing", pid, self.key)
                _processes.send(pid, signal.SIGKILL)
                await _processes.ended([pid], _processes.KILLED_WITHIN)
        supervision.cancel()
        await asyncio.gather(supervision, return_exceptions=True)

    def _serving(self, info: base.WorkerInfo) -> bool:
        return not self.stopping and id(info) not in self._retired

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

    def take_in(self, standby: _Group) -> None:
        """A standby worker told to serve this group's key becomes its next slot (scale-out
        without a start): its process goes on serving; once it exits, the slot restarts as a
        worker of the key. The standby's own supervision ends with that process."""
        info = standby.workers[0]
        standby.key, standby.stopping = self.key, True  # no restart as a standby
        self.tasks.extend(standby.tasks)  # awaited by this group's stop
        slot = len(self.workers)
        self.workers.append(info)
        self._supervise_slot(slot, info.pid)

    async def _supervise(self, slot: int, adopted_pid: int | None) -> None:
        info = self.workers[slot]
        s = self.driver.settings
        backoff = s.restart_backoff
        if adopted_pid is not None:
            await self._wait_adopted(adopted_pid)
            info.worker_id = self._worker_id(slot)  # a standby taken in ran under its own id
        while self._serving(info):
            started = time.monotonic()
            try:
                code = await self._run_once(slot, info)
            except OSError as exc:
                logger.error("cannot start worker for key %r: %s", self.key, exc)
                code = -1
            info.last_exit = code
            if not self._serving(info):
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
        while not self.stopping and _processes.alive(pid):
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        """Stop every worker of the group (SIGTERM, SIGKILL after `stop_timeout`) and end
        their supervision. Runs to its end even when its caller is cancelled (a controller
        stopping during a group's stop): a stop cut short would leave a worker supervised
        by nobody's group, restarted by nobody, stopped by nobody."""
        if self._stopped is None:
            self._stopped = asyncio.create_task(self._stop(), name=f"stop group {self.key!r}")
        await asyncio.shield(self._stopped)

    async def _stop(self) -> None:
        self.stopping = True
        pids = [w.pid for w in self.workers if w.pid is not None]
        for pid in pids:
            _processes.send(pid, signal.SIGTERM)
        if not await _processes.ended(pids, self.driver.settings.stop_timeout):
            for pid in pids:
                if _processes.alive(pid):
                    logger.warning(
                        "worker pid %d of key %r ignored SIGTERM: killing", pid, self.key
                    )
                    _processes.send(pid, signal.SIGKILL)
            await _processes.ended(pids, _processes.KILLED_WITHIN)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, *self.leaving, return_exceptions=True)


class SubprocessDriver:
    """Runs worker groups as supervised local processes."""

    def __init__(self, context: base.PoolContext, settings: SubprocessSettings) -> None:
        self.context = context
        self.settings = settings
        self.owner = settings.owner or f"osrdyne:{context.pool}"
        self._groups: dict[str, _Group] = {}
        #: Standby workers (groups without a key yet), oldest first.
        self._standby: standby.StandbyPool[_Group] = standby.StandbyPool(
            queue=lambda group: group.standby_queue,
            name=lambda group: f"worker {group.workers[0].worker_id}",
            discard=self._discard,
        )
        self._retiring: set[asyncio.Task[None]] = set()
        self._adopted = False
        self._closed = False

    async def start(self, key: str) -> None:
        if self._closed:
            raise base.DriverError(f"driver closed: group {key!r} not started")
        self._adopt_once()
        if key not in self._groups:
            taken = await self._standby.take(key)
            if taken is None:
                if key not in self._groups:  # not started meanwhile
                    self._launch(key, {})
            elif key in self._groups or self._closed:  # started another way meanwhile
                self._retire(taken)
            else:
                taken.assign(key)
                self._groups[key] = taken
        self._replenish()

    async def stop(self, key: str) -> None:
        self._adopt_once()
        group = self._groups.pop(key, None)
        if group is not None:
            await asyncio.shield(self._retire(group))

    async def list(self) -> set[str]:
        self._adopt_once()
        self._replenish()
        return set(self._groups)

    async def close(self) -> None:
        self._closed = True
        groups = [*self._groups.values(), *self._standby.clear()]
        self._groups = {}
        await asyncio.gather(*(g.stop() for g in groups), *self._retiring)

    def capacity(self) -> int:
        """Most groups at once (the `Capacity` protocol): `max_processes`, or the machine's
        memory over `memory_per_worker`, less the standby workers and the workers groups
        run beyond their `workers` (grown by the scaler), divided by the workers of a
        group."""
        s = self.settings
        return sizing.capacity(
            cap=self._process_limit(),
            workers=s.workers,
            standby=s.standby,
            sizes=self._used().values(),
        )

    def _process_limit(self) -> int:
        processes = self.settings.max_processes
        if processes is None:
            processes = _processes.machine_memory() // (self.settings.memory_per_worker * 2**20)
        return processes

    def _used(self) -> dict[str, int]:
        """Processes of each group, those draining away counted."""
        return {key: len(g.workers) + len(g.leaving) for key, g in self._groups.items()}

    # -- sizes (the `Sizes` protocol) -----------------------------------------------------

    async def resize(self, key: str, workers: int) -> None:
        """Run `workers` processes for `key` (at least 1), growing only into the processes
        the cap leaves; no-op for a key without a group."""
        group = self._groups.get(key)
        if group is None or group.stopping or self._closed:
            return
        current = len(group.workers)
        # Each worker more is a process more, whether started or taken from the standby
        # workers (a standby taken is replaced).
        used = len(self._standby) + sum(self._used().values())
        count = sizing.clamp(current=current, wanted=workers, cap=self._process_limit(), used=used)
        if count > current:
            await self._grow_from_standby(key, count)
            group = self._groups.get(key)
            if group is None or group.stopping or self._closed:
                return
        group.resize(count)

    async def _grow_from_standby(self, key: str, count: int) -> None:
        """Grow `key`'s group towards `count` workers with the standby workers that wait
        (each told its key first): a worker already running, not one to start."""
        taken = 0
        while True:
            group = self._groups.get(key)
            if group is None or group.stopping or self._closed or len(group.workers) >= count:
                break
            taken_in = await self._standby.take(key)
            if taken_in is None:
                break
            group = self._groups.get(key)
            if group is None or group.stopping or self._closed:
                self._retire(taken_in)  # told the key of a group stopped meanwhile
                break
            group.take_in(taken_in)
            taken += 1
        if taken:
            logger.info("%d standby worker(s) taken into the group of key %r", taken, key)
            self._replenish()

    def sizes(self) -> dict[str, int]:
        return {key: len(g.workers) for key, g in self._groups.items()}

    def describe(self) -> dict[str, tuple[base.WorkerInfo, ...]]:
        """The workers of each group (the `Describes` protocol)."""
        return {key: tuple(g.workers) for key, g in self._groups.items()}

    # -- standby workers (the `Standby` protocol) -----------------------------------------

    def standby_workers(self) -> tuple[base.WorkerInfo, ...]:
        return tuple(g.workers[0] for g in self._standby.waiting)

    def attach(self, assign: base.Assign | None) -> None:
        self._standby.attach(assign)

    async def _discard(self, group: _Group) -> None:
        self._retire(group)

    def _replenish(self) -> None:
        """Start standby workers until there are `standby` of them."""
        while not self._closed and len(self._standby) < self.settings.standby:
            group = _Group(self, None)
            self._standby.add(group)
            group.start({})

    def _retire(self, group: _Group) -> asyncio.Task[None]:
        """Stop `group`, out of the driver's books: `close()` still waits for its stop."""
        task = asyncio.create_task(group.stop(), name=f"retire group {group.key!r}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return task

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
        for pid, env in _processes.workers_of(self.owner, self.context.pool, owner_env=OWNER_ENV):
            key, slot = env.get("WORKER_KEY"), env.get(SLOT_ENV, "")
            if STANDBY_ENV in env:
                _processes.send(pid, signal.SIGTERM)  # which key it was given, if any, is unknown
                continue
            if key is None or not slot.isdigit():
                continue
            if int(slot) >= self.settings.workers or int(slot) in found.get(key, {}):
                _processes.send(pid, signal.SIGTERM)  # the group shrank, or a stray duplicate
                continue
            found.setdefault(key, {})[int(slot)] = pid
        for key, slots in found.items():
            logger.info("adopting %d running worker(s) of key %r", len(slots), key)
            self._launch(key, slots)
