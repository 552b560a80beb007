"""The docker driver against a real Docker engine (our own dockerd, see conftest).

Containers run busybox `sleep` for the bookkeeping tests, and the real echo worker
(`python -m worker_sdk.examples.echo`, on the host's interpreter mounted read-only) for the
test that goes through the broker.
"""

from __future__ import annotations

import json
from typing import Any

import aio_pika
import pytest

from drivers import base, names
from drivers import docker as docker_driver
from osrdyne import wire
from tests.docker_engine import pool_containers

DriverFactory = Any

# Generous: the first test's setup may install and start dockerd (scripts/ensure_dockerd.sh).
pytestmark = pytest.mark.timeout(300)

KEY = "Infra/42 é\u00e9 — spaces & ünïcode"


async def test_start_list_stop_are_idempotent(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str
) -> None:
    driver = docker_driver(workers=2)
    assert await driver.list() == set()
    await driver.start(KEY)
    first = {c.id for c in pool_containers(docker_client, pool_name)}
    await driver.start(KEY)
    assert {c.id for c in pool_containers(docker_client, pool_name)} == first
    assert len(first) == 2
    assert await driver.list() == {KEY}

    await driver.stop(KEY)
    await driver.stop(KEY)
    assert pool_containers(docker_client, pool_name) == []
    assert await driver.list() == set()
    await driver.stop("never-started")


async def test_containers_carry_key_labels_and_environment(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str, amqp_uri: str
) -> None:
    driver = docker_driver(workers=3, environment={"EXTRA": "1", "WORKER_KEY": "overridden"})
    await driver.start(KEY)
    containers = pool_containers(docker_client, pool_name)
    assert len(containers) == 3
    assert sorted(c.labels["osrdyne.index"] for c in containers) == ["0", "1", "2"]
    for c in containers:
        assert names.is_dns_label(c.name)
        assert c.status == "running"
        assert c.labels["osrdyne.key"] == KEY
        assert c.labels["osrdyne.pool"] == pool_name
        assert c.labels["osrdyne.worker-id"] == c.name
        assert c.labels["osrdyne.version"] == driver.version
        env = dict(item.split("=", 1) for item in c.attrs["Config"]["Env"])
        expected = base.PoolContext(pool_name, amqp_uri).environment(KEY, c.name)
        assert {k: env[k] for k in expected} == expected
        assert env["EXTRA"] == "1"
        assert c.attrs["HostConfig"]["NetworkMode"] == "host"
        assert c.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"


async def test_mounts_limits_and_restart_policy_reach_the_engine(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str, tmp_path: Any
) -> None:
    (tmp_path / "data").mkdir()
    driver = docker_driver(
        volumes=[
            {"source": str(tmp_path / "data"), "target": "/data", "read_only": True},
            {"source": str(tmp_path), "target": "/scratch"},
        ],
        cpus=0.5,
        memory="64m",
        restart_policy="on-failure",
        restart_max_retries=3,
        labels={"team": "infra"},
    )
    await driver.start(KEY)
    (container,) = pool_containers(docker_client, pool_name)
    host = container.attrs["HostConfig"]
    assert sorted(host["Binds"]) == sorted(
        [f"{tmp_path / 'data'}:/data:ro", f"{tmp_path}:/scratch:rw"]
    )
    assert host["NanoCpus"] == 500_000_000
    assert host["Memory"] == 64 * 1024 * 1024
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert container.labels["team"] == "infra"


async def test_distinct_keys_are_distinct_groups(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str
) -> None:
    driver = docker_driver()
    similar = ["infra 1", "infra-1", "INFRA_1"]
    for key in similar:
        await driver.start(key)
    assert await driver.list() == set(similar)
    await driver.stop("infra-1")
    assert await driver.list() == {"infra 1", "INFRA_1"}


async def test_fresh_driver_adopts_existing_containers(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str
) -> None:
    await docker_driver(workers=2).start(KEY)
    before = {c.id for c in pool_containers(docker_client, pool_name)}

    restarted = docker_driver(workers=2)  # a controller restart: no state but the engine's
    assert await restarted.list() == {KEY}
    await restarted.start(KEY)
    assert {c.id for c in pool_containers(docker_client, pool_name)} == before
    await restarted.stop(KEY)
    assert pool_containers(docker_client, pool_name) == []


async def test_stopped_container_is_started_again(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str
) -> None:
    driver = docker_driver()
    await driver.start(KEY)
    (container,) = pool_containers(docker_client, pool_name)
    container.stop(timeout=0)
    await driver.start(KEY)
    container.reload()
    assert container.status == "running"


async def test_new_version_replaces_containers_on_start(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str
) -> None:
    old = docker_driver(workers=2, environment={"RELEASE": "1"})
    new = docker_driver(workers=2, environment={"RELEASE": "2"})
    assert old.version != new.version
    await old.start(KEY)
    old_ids = {c.id for c in pool_containers(docker_client, pool_name)}

    await new.start(KEY)
    containers = pool_containers(docker_client, pool_name)
    assert len(containers) == 2
    assert not old_ids & {c.id for c in containers}
    assert {c.labels["osrdyne.version"] for c in containers} == {new.version}
    assert all("RELEASE=2" in c.attrs["Config"]["Env"] for c in containers)


async def test_list_reports_outdated_groups_and_start_upgrades_them(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str
) -> None:
    await docker_driver(workers=3, command=["sleep", "3000"]).start("a")
    await docker_driver(workers=3, command=["sleep", "3000"]).start("b")
    new = docker_driver(workers=1)
    assert await new.list() == {"a", "b"}
    assert new.outdated() == {"a", "b"}
    assert len(pool_containers(docker_client, pool_name)) == 6  # listing changes nothing
    for key in sorted(new.outdated()):  # as the worker-group loop applies its upgrade plan
        await new.start(key)
    containers = pool_containers(docker_client, pool_name)
    assert len(containers) == 2
    assert {c.labels["osrdyne.version"] for c in containers} == {new.version}
    # Same configuration, more workers: the surplus comes, nothing is replaced.
    more = docker_driver(workers=2)
    assert more.version == new.version
    kept = {c.id for c in containers}
    await more.start("a")
    assert kept <= {c.id for c in pool_containers(docker_client, pool_name)}
    assert len(pool_containers(docker_client, pool_name)) == 3


async def test_resize_grows_within_the_cap_and_shrinks_from_the_top(
    docker_driver: DriverFactory, docker_client: Any, pool_name: str
) -> None:
    driver = docker_driver(workers=1, max_containers=3)
    await driver.start(KEY)
    await driver.resize(KEY, 3)  # a group the driver has not listed yet: nothing
    assert len(pool_containers(docker_client, pool_name)) == 1
    assert await driver.list() == {KEY}
    await driver.resize(KEY, 5)  # only 3 containers fit
    assert driver.sizes() == {KEY: 3}
    assert driver.capacity() == 1  # the extra containers count against new keys' room
    containers = pool_containers(docker_client, pool_name)
    assert sorted(c.labels["osrdyne.index"] for c in containers) == ["0", "1", "2"]
    assert all(c.status == "running" for c in containers)
    assert await driver.list() == {KEY} and driver.outdated() == set()

    fresh = docker_driver(workers=1, max_containers=3)  # a restarted controller adopts it
    assert await fresh.list() == {KEY}
    assert fresh.sizes() == {KEY: 3} and fresh.outdated() == set()

    await driver.resize(KEY, 1)
    remaining = pool_containers(docker_client, pool_name)
    assert [c.labels["osrdyne.index"] for c in remaining] == ["0"]
    assert remaining[0].id in {c.id for c in containers}
    assert driver.sizes() == {KEY: 1} and driver.capacity() == 3

    await driver.stop(KEY)
    await driver.resize(KEY, 2)  # a stopped group is not brought back by a late resize
    assert driver.sizes() == {} and pool_containers(docker_client, pool_name) == []


async def test_unreachable_engine_is_driver_unavailable(docker_driver: DriverFactory) -> None:
    for url in ("unix:///run/osrdyne-no-such-engine.sock", "tcp://127.0.0.1:9"):
        driver = docker_driver(base_url=url, timeout=5)
        with pytest.raises(base.DriverUnavailable):
            await driver.start(KEY)
        with pytest.raises(base.DriverUnavailable):
            await driver.list()
        with pytest.raises(base.DriverUnavailable):
            await driver.stop(KEY)


async def test_missing_image_is_driver_rejected(docker_driver: DriverFactory) -> None:
    driver = docker_driver(image="osrdyne-test-no-such-image:1", pull="never")
    with pytest.raises(base.DriverRejected) as caught:
        await driver.start(KEY)
    assert caught.value.__cause__ is not None


def test_settings_import_without_instantiating_the_sdk() -> None:
    settings = docker_driver.DockerSettings()
    assert settings.network_mode == "host"
    assert settings.restart_policy == "unless-stopped"
    assert settings.workers == 1
    for name, field in docker_driver.DockerSettings.model_fields.items():
        assert field.description, name


async def test_echo_worker_in_a_container_answers_through_the_broker(
    docker_driver: DriverFactory,
    docker_client: Any,
    pool_name: str,
    amqp_uri: str,
    host_python: tuple[str, list[dict[str, Any]]],
    repo: Any,
) -> None:
    python, mounts = host_python
    driver = docker_driver(
        workers=2,
        command=[python, "-m", "worker_sdk.examples.echo"],
        environment={"PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"},
        volumes=mounts,
    )
    pool = wire.PoolNames(pool_name)
    connection = await aio_pika.connect(amqp_uri, client_properties={"connection_name": pool_name})
    async with connection:
        channel = await connection.channel()
        # The part of the pool's topology a worker needs (the controller declares it for real).
        await channel.declare_exchange(pool.activity_exchange, aio_pika.ExchangeType.FANOUT)
        activity = await channel.declare_queue(exclusive=True)
        await activity.bind(pool.activity_exchange)
        requests = await channel.declare_queue(pool.request_queue(KEY))
        replies = await channel.declare_queue(exclusive=True)
        try:
            await driver.start(KEY)
            await channel.default_exchange.publish(
                aio_pika.Message(
                    b"",
                    reply_to=replies.name,
                    correlation_id="c1",
                    headers={"x-rpc-path": "whoami"},
                ),
                routing_key=requests.name,
            )
            async with replies.iterator(timeout=60) as messages:
                async for message in messages:
                    await message.ack()
                    break
            assert message.correlation_id == "c1"
            assert message.headers["x-status"] == "ok"
            answer = json.loads(message.body)
            assert answer["key"] == KEY
            assert answer["worker_id"] in {
                c.name for c in pool_containers(docker_client, pool_name)
            }
            events = await _activity_events(activity)
            assert "started" in events
        finally:
            await driver.stop(KEY)
            await channel.queue_delete(requests.name)
            await channel.exchange_delete(pool.activity_exchange)


async def _activity_events(queue: aio_pika.abc.AbstractQueue) -> list[str]:
    events = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        events.append(str((message.headers or {}).get("x-event")))
    return events


def test_compose_config_holds_valid_docker_settings(repo: Any) -> None:
    import tomllib

    config = tomllib.loads((repo / "deploy" / "compose" / "osrdyne.toml").read_text())
    assert config["driver"]["kind"] == "docker"
    docker_driver.DockerSettings.model_validate(config["driver"]["docker"])
