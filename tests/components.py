"""The suite's tiers and parallel groups: which component each test needs.

A pytest plugin (loaded by tests/conftest.py). Every test gets the marker of each component it
needs, found from its fixtures, its folder, or a marker the module sets itself:

| marker          | the component                                   | found by                  |
| --------------- | ----------------------------------------------- | ------------------------- |
| `cluster`       | the three-node RabbitMQ cluster                 | fixture `cluster`         |
| `broker_node`   | a private RabbitMQ node the test stops/restarts | fixture `rabbit_node`     |
| `systemd`       | a real systemd in a systemd-nspawn container    | fixture `systemd_host`    |
| `compose`       | deploy/compose built and run with docker-compose| folder `tests/deploy`     |
| `docker`        | osrdyne's own Docker engine                     | fixture `docker_host`     |
| `spark`         | PySpark: a JVM (in the test, or in its workers) | fixture `spark`, folders  |
| `spark_connect` | the Spark Connect server                        | fixture `connect_url`     |
| `browser`       | headless Chromium                               | fixture `browser`         |
| `kubernetes`    | the single-node Kubernetes cluster              | fixture `kube`, folder    |
| `chaos`         | minutes of faults: nodes lost and brought back  | set by the test or module |
| `slow`          | none of the above, but seconds of real waiting  | set by the test or module |

`scripts/test.sh --quick` deselects every one of them (`QUICK` below): what is left runs on the
shared broker and local processes only, and covers every package. `scripts/test.sh` runs
everything, in parallel (pytest-xdist, `--dist loadgroup`): a component that exists once per
machine (the cluster, the systemd container, the compose project, the Connect server's port,
a private node the tests kill) puts its tests in one xdist group, so one worker runs them one
after another while the others run the rest; so does Spark, whose JVMs would otherwise take
the two cores, one per worker. A test of several such components joins the first group of
`GROUPS` (the Connect tests that compare with the embedded session start one of their own).
The tests that take broker nodes down (`NODE_FAULTS`) run apart, after the rest. The cluster's
tests are split over two clusters by module (`SECOND_CLUSTER`: group `cluster-2`, a second
cluster of three nodes beside the first, tests/cluster/conftest.py), so that a run waits for
half of them, not for all: they spend most of their time waiting for a node or a link to be
found lost, not on the cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

#: Marker: the fixtures that mean a test needs the component.
FIXTURES: dict[str, frozenset[str]] = {
    # `healthy_cluster`, not `cluster`: tests/spark/test_cluster.py has a Spark one of that name.
    "cluster": frozenset({"healthy_cluster", "cluster_pool"}),
    "broker_node": frozenset({"rabbit_node"}),
    "systemd": frozenset({"systemd_host"}),
    "docker": frozenset({"docker_host"}),
    "spark": frozenset({"spark"}),
    "spark_connect": frozenset({"connect_url"}),
    "browser": frozenset({"browser"}),
    "kubernetes": frozenset({"kube"}),
}

#: Marker: the folders whose every test needs the component.
FOLDERS: dict[str, tuple[Path, ...]] = {
    "cluster": (TESTS / "cluster",),
    "compose": (TESTS / "deploy",),
    "spark": (TESTS / "spark", TESTS / "spark_connect"),
    "spark_connect": (TESTS / "spark_connect",),
    "kubernetes": (TESTS / "kubernetes",),
}

#: xdist group of the components that exist once per machine, in order of precedence, and
#: the fixtures (or folders) that put a test in it.
GROUPS: dict[str, str] = {
    "cluster": "cluster",
    "compose": "compose",
    "systemd": "systemd",
    "broker_node": "broker-node",
    "spark_connect": "spark-connect",
    # The cluster is shared; its pods (a Python worker each) and the tests' waits on them
    # run one test at a time, beside the rest of the run.
    "kubernetes": "kubernetes",
    # Not once per machine, but a JVM in each xdist worker that asks for the embedded session
    # (fixture `spark`): four of them took the two cores from everything else. Spark tests
    # that only start worker processes (each its own JVM wherever it runs) are in no group.
    "spark": "spark",
}
#: Cluster test modules run on the second cluster (group `cluster-2`): about half of the
#: cluster tests' time (on one cluster on 2026-11-27: chaos 238 s and partitions 196 s here,
#: repeated faults 212 s, node loss 123 s and refusals 61 s on the first).
SECOND_CLUSTER = frozenset({"test_chaos.py", "test_partitions.py"})

#: Markers given by a folder that do not put a test in their group by themselves.
UNGROUPED_FOLDERS = frozenset({"spark"})

#: What take nodes down: run apart, after the rest (`scripts/test.sh`), not beside the JVMs.
NODE_FAULTS = "cluster or broker_node"

DESCRIPTIONS: dict[str, str] = {
    "cluster": "needs the three-node RabbitMQ cluster (scripts/ensure_cluster.sh)",
    "broker_node": "stops or restarts a private RabbitMQ node of its own",
    "systemd": "boots a real systemd in a systemd-nspawn container",
    "compose": "builds and runs deploy/compose with docker-compose",
    "docker": "needs osrdyne's own Docker engine (scripts/ensure_dockerd.sh)",
    "spark": "runs PySpark (a JVM) in the test or in its workers",
    "spark_connect": "needs the Spark Connect server (scripts/ensure_spark_connect.sh)",
    "browser": "drives headless Chromium",
    "kubernetes": "needs the Kubernetes cluster built here (scripts/ensure_kubernetes.sh)",
    "chaos": "causes faults for minutes: node after node lost and brought back",
    "slow": "waits seconds of real time on the product's own delays",
}

#: Markers that are no component: registered here with the others.
OTHER_MARKERS: dict[str, str] = {
    "soak": "a long run, opt-in: --soak (or --chaos for the one marked chaos too)",
    "rabbitmq4": "broker-facing: scripts/test.sh runs it on RabbitMQ 4.0 too (given by folder)",
    "not_on_rabbitmq4(reason)": "broker-facing, but left out of scripts/test.sh's 4.0 pass: "
    "what it exercises does not differ on 4.0 (the reason says why)",
}

#: The broker-facing folders: scripts/test.sh runs their tests on RabbitMQ 3.10 and, again,
#: on 4.0 (marker `rabbitmq4`, given here), but those marked `not_on_rabbitmq4`: the run's
#: time goes to what differs between the two (docs/operations.md, "Broker versions").
BOTH_BROKERS = tuple(
    TESTS / d for d in ("dispatch", "dead_letters", "bounds", "faults", "cluster", "interop")
)

#: What `scripts/test.sh --quick` leaves out (a `-m` expression).
QUICK = "not (" + " or ".join(DESCRIPTIONS) + ")"


def pytest_configure(config: pytest.Config) -> None:
    for marker, description in {**DESCRIPTIONS, **OTHER_MARKERS}.items():
        config.addinivalue_line("markers", f"{marker}: {description}")


def components(item: pytest.Item) -> list[str]:
    """The component markers of `item`, from its fixtures, folder and own markers."""
    fixtures = set(getattr(item, "fixturenames", ()))
    parents = set(Path(str(item.path)).parents)
    found = [
        marker
        for marker in DESCRIPTIONS
        if fixtures & FIXTURES.get(marker, frozenset())
        or parents & set(FOLDERS.get(marker, ()))
        or item.get_closest_marker(marker) is not None
    ]
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its components (before `-m` selects on them) and its xdist group."""
    for item in items:
        if set(Path(str(item.path)).parents) & set(BOTH_BROKERS) and (
            item.get_closest_marker("not_on_rabbitmq4") is None
        ):
            item.add_marker(pytest.mark.rabbitmq4)
        found = components(item)
        for marker in found:
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        grouped = [m for m in found if m not in UNGROUPED_FOLDERS or _by_fixture(item, m)]
        group = next((GROUPS[m] for m in GROUPS if m in grouped), None)
        if group == "cluster" and Path(str(item.path)).name in SECOND_CLUSTER:
            group = "cluster-2"
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


def _by_fixture(item: pytest.Item, marker: str) -> bool:
    return bool(set(getattr(item, "fixturenames", ())) & FIXTURES.get(marker, frozenset()))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup`, fail the run if xdist did not put the groups in the node ids
    (how its scheduler sees them): on pytest 9.2 it silently does not (pytest-xdist#1386),
    and the Connect server or the cluster would be started by several workers at once."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid
    ]
    if lost:
        raise pytest.UsageError(
            f"--dist loadgroup lost the xdist groups of {len(lost)} tests (first: {lost[0]}): "
            "this pytest-xdist does not work with this pytest (pytest-xdist#1386)"
        )
