"""The subprocess driver with real processes: N workers per group, idempotent start/stop, a
crashed worker restarted with back-off, adoption by a new driver, everything ended on close.
The worker command is a tiny script (no broker needed): it records its environment and sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from drivers._processes import alive
from drivers.base import PoolContext
from drivers.subprocess import SubprocessDriver, SubprocessSettings
from tests.waiting import eventually

SCRIPT = """
import json, os, sys, time
out = sys.argv[1]
path = os.path.join(out, os.environ["WORKER_ID"] + f"-{os.getpid()}.json")
with open(path + ".tmp", "w") as f:
    json.dump({k: v for k, v in os.environ.items() if k.startswith("WORKER_")}, f)
os.rename(path + ".tmp", path)  # the test lists finished files only
time.sleep(3600)
"""


@pytest.fixture
def make_driver(tmp_path: Path):  # type: ignore[no-untyped-def]
    drivers: list[SubprocessDriver] = []
    out = tmp_path / "out"
    out.mkdir()

    def make(**options: object) -> SubprocessDriver:
        settings = SubprocessSettings(
            command=[sys.executable, "-c", SCRIPT, str(out)],
            owner=str(tmp_path / "state"),
            **{"restart_backoff": 0.1, "stop_timeout": 5, **options},  # type: ignore[arg-type]
        )
        driver = SubprocessDriver(PoolContext(pool="p", amqp_uri="amqp://x/"), settings)
        drivers.append(driver)
        return driver

    make.out = out  # type: ignore[attr-defined]
    yield make
    for driver in drivers:
        for group in driver.describe().values():
            for worker in group:
                if worker.pid:
                    try:
                        os.kill(worker.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def pids(driver: SubprocessDriver, key: str) -> list[int]:
    return [w.pid for w in driver.describe().get(key, ()) if w.pid is not None]


async def test_start_runs_n_workers_with_the_protocol_environment(make_driver) -> None:  # type: ignore[no-untyped-def]
    driver = make_driver(workers=3)
    await driver.start("infra/42 ü")
    await driver.start("infra/42 ü")  # idempotent
    assert await driver.list() == {"infra/42 ü"}
    await eventually(lambda: len(list(make_driver.out.glob("*.json"))) == 3, what="3 workers")
    envs = [json.loads(p.read_text()) for p in make_driver.out.glob("*.json")]
    assert {e["WORKER_KEY"] for e in envs} == {"infra/42 ü"}
    assert {e["WORKER_REQUESTS_QUEUE"] for e in envs} == {"p-req-infra/42+20+C3+BC"}
    assert {e["WORKER_ACTIVITY_EXCHANGE"] for e in envs} == {"p-activity-xchg"}
    assert len({e["WORKER_ID"] for e in envs}) == 3
    await driver.close()


async def test_stop_is_idempotent_and_ends_the_workers(make_driver) -> None:  # type: ignore[no-untyped-def]
    driver = make_driver(workers=2)
    await driver.start("k")
    running = await eventually(lambda: len(pids(driver, "k")) == 2 and pids(driver, "k"))
    await driver.stop("k")
    await driver.stop("k")
    await driver.stop("never started")
    assert await driver.list() == set()
    assert not any(alive(pid) for pid in running)
    await driver.close()


async def test_a_crashed_worker_is_restarted_with_backoff(make_driver) -> None:  # type: ignore[no-untyped-def]
    driver = make_driver()
    await driver.start("k")
    first = (await eventually(lambda: pids(driver, "k")))[0]
    os.kill(first, signal.SIGKILL)
    second = await eventually(lambda: [p for p in pids(driver, "k") if p != first])
    assert alive(second[0])
    info = driver.describe()["k"][0]
    assert info.restarts == 1 and info.last_exit == -signal.SIGKILL
    await driver.close()


async def test_a_new_driver_adopts_workers_left_running(make_driver) -> None:  # type: ignore[no-untyped-def]
    first = make_driver(workers=2)
    await first.start("k")
    running = sorted(await eventually(lambda: len(pids(first, "k")) == 2 and pids(first, "k")))
    # Its controller is SIGKILLed: the supervisors vanish, the workers live on.
    supervisors = [t for g in first._groups.values() for t in g.tasks]
    for task in supervisors:
        task.cancel()
    await asyncio.gather(*supervisors, return_exceptions=True)
    first._groups.clear()
    second = make_driver(workers=2)
    assert await second.list() == {"k"}
    assert sorted(pids(second, "k")) == running
    assert all(w.adopted for w in second.describe()["k"])
    await second.start("k")  # no duplicates
    assert sorted(pids(second, "k")) == running
    await second.close()
    assert not any(alive(pid) for pid in running)


async def test_close_ends_every_group(make_driver) -> None:  # type: ignore[no-untyped-def]
    driver = make_driver()
    for key in ("a", "b", "c"):
        await driver.start(key)
    running = await eventually(
        lambda: (
            sum((pids(driver, k) for k in "abc"), [])
            if all(pids(driver, k) for k in "abc")
            else None
        )
    )
    await driver.close()
    assert not any(alive(pid) for pid in running)


async def test_a_stop_cut_short_by_its_caller_still_ends_the_group(make_driver) -> None:  # type: ignore[no-untyped-def]
    """A controller stopping while its group loop stops a group cancels that stop midway (the
    worker ignores SIGTERM as it loads): the group, out of the driver's books already, is
    still stopped (SIGKILL after `stop_timeout`), and `close()` waits for it. Before, the
    worker ran on, its supervision task left behind."""
    driver = make_driver(stop_timeout=1)
    ignoring = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + SCRIPT
    driver.settings.command[2] = ignoring
    await driver.start("k")
    running = await eventually(lambda: pids(driver, "k"))
    await eventually(lambda: list(make_driver.out.glob("*.json")), what="SIGTERM ignored")
    stopping = asyncio.create_task(driver.stop("k"))
    await asyncio.sleep(0.2)  # inside its wait for the worker to end
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert await driver.list() == set()
    supervisors = list(asyncio.all_tasks())
    await driver.close()
    assert not any(alive(pid) for pid in running)
    left = [t for t in supervisors if t.get_name().startswith("subprocess worker")]
    assert left and all(t.done() for t in left)


async def test_a_closed_driver_starts_nothing(make_driver) -> None:  # type: ignore[no-untyped-def]
    from drivers.base import DriverError

    driver = make_driver()
    await driver.close()
    with pytest.raises(DriverError, match="closed"):
        await driver.start("k")
    assert await driver.list() == set()


async def test_resize_grows_and_drains_the_highest_slots(make_driver) -> None:  # type: ignore[no-untyped-def]
    driver = make_driver(workers=1, max_processes=3)
    await driver.start("k")
    await eventually(lambda: len(pids(driver, "k")) == 1, what="1 worker")
    await driver.resize("k", 5)  # only 3 processes fit
    assert driver.sizes() == {"k": 3}
    assert driver.capacity() == 1  # the extra workers count against new keys' room
    grown = await eventually(lambda: len(pids(driver, "k")) == 3 and pids(driver, "k"))
    await driver.resize("k", 1)
    assert driver.sizes() == {"k": 1}
    await eventually(lambda: not driver._groups["k"].leaving, what="2 workers drained away")
    assert [alive(pid) for pid in grown] == [True, False, False]
    # A drained slot's supervision ended with it: nothing restarts it.
    assert sum(not task.done() for task in driver._groups["k"].tasks) == 1
    assert pids(driver, "k") == grown[:1]
    await driver.resize("absent", 4)  # no group: nothing
    assert driver.sizes() == {"k": 1}
    await driver.close()
    assert not alive(grown[0])
