"""KEDA and HPA modes on a real cluster, with the real autoscalers.

KEDA mode: the operator and metrics API server of KEDA (built from its module,
scripts/build_kubernetes.sh) read the group's queue on the real broker through the trigger
the driver writes; KEDA takes the group from 0 pods to 1 and back, and the HPA it makes (run
by the controller manager's HPA controller, fed by KEDA's external metrics) from 1 to N.

HPA mode: the HorizontalPodAutoscaler the driver writes is run by the real HPA controller,
which asks the external metrics API for exactly the metric deploy/hpa/ has prometheus-adapter
serve. prometheus-adapter itself cannot be built here (the Go module proxy serves no version
of sigs.k8s.io/prometheus-adapter), so the metric leg is the one part of HPA mode not run for
real: the test stops where the HPA controller asks for the metric (docs/drivers.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import Caller
from tests.faults.report import Tally
from tests.kubernetes.conftest import KubeCluster, kubernetes_controller
from tests.kubernetes.test_deployments import COLD, pods_of, running_pods
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(900)


def replicas(kube: KubeCluster, namespace: str) -> int | None:
    deployments = kube.get("deployments", namespace=namespace)
    return deployments[0]["spec"].get("replicas") if deployments else None


async def test_keda_takes_a_key_from_zero_to_n_pods_on_its_queue_and_back(
    pool: str,
    tmp_path: Path,
    kube: KubeCluster,
    make_namespace: Callable[..., Any],
    make_caller: Callable[..., Any],
) -> None:
    """A burst of slow requests on one key: KEDA's rabbitmq trigger (QueueLength, 5 a pod)
    reads the queue's depth, its HPA grows the Deployment to the maximum, 3; the burst is
    answered, every request once, `ok`; idle, the group goes back to 0 pods after the cool
    down; a new request on the empty group wakes it (0 -> 1) and is answered."""
    namespace = make_namespace("keda")
    tally = Tally("kubernetes: KEDA scales a hot key from 0 to N and back")
    caller: Caller = await make_caller(tally)
    keda = {
        "enabled": True, "min_replicas": 0, "max_replicas": 3, "value": 5,
        "polling_interval": 2, "cooldown_period": 10, "scale_down_stabilization": 5,
    }  # fmt: skip
    env = {"WORKER_ACTIVITY_INTERVAL": "0.5", "WORKER_CONCURRENCY": "1", "ECHO_DELAY": "1"}
    # The group is osrdyne's to remove when idle: here it must outlive KEDA's scale to zero.
    groups = {"unbind_delay": 600, "stop_delay": 600}
    async with kubernetes_controller(
        pool, tmp_path, kube, namespace, groups=groups,
        driver={"keda": keda, "environment": env},
    ):  # fmt: skip
        await caller.send(pool, "hot", b"first")
        assert not await caller.settle(COLD), "the first request"
        (scaled,) = kube.get("scaledobjects.keda.sh", namespace=namespace.name)
        assert scaled["spec"]["triggers"][0]["metadata"]["hostFromEnv"] == "WORKER_AMQP_URI"

        for n in range(60):  # a minute of work for one pod
            await caller.send(pool, "hot", f"{n}".encode())
        await eventually(
            lambda: replicas(kube, namespace.name) == 3 and len(running_pods(kube, namespace)) == 3,
            timeout=COLD, interval=1, what="KEDA's HPA grew the group to 3 pods",
        )  # fmt: skip
        unanswered = await caller.settle(COLD, grace=2)
        assert not unanswered, caller.describe(unanswered)

        await eventually(
            lambda: replicas(kube, namespace.name) == 0 and not pods_of(kube, namespace),
            timeout=COLD, interval=1, what="KEDA scaled the idle group to zero",
        )  # fmt: skip
        await caller.send(pool, "hot", b"wake up")
        assert not await caller.settle(COLD, grace=2), "the request that woke the group"
        assert replicas(kube, namespace.name) == 1
    row = tally.row()
    assert row["sent"] == 62 and row["ok"] == 62 and row["duplicated"] == 0, row
    hpas = kube.get("horizontalpodautoscalers", namespace=namespace.name)
    assert [h["metadata"]["name"] for h in hpas] == [f"keda-hpa-{scaled['metadata']['name']}"]


async def test_hpa_mode_s_autoscaler_is_run_by_the_hpa_controller_on_the_adapter_s_metric(
    pool: str,
    tmp_path: Path,
    kube: KubeCluster,
    make_namespace: Callable[..., Any],
    make_caller: Callable[..., Any],
) -> None:
    """The HPA the driver writes is valid for the real API server, owned by the group's
    Deployment (the garbage collector removes it with it), and the HPA controller asks the
    external metrics API for `rabbitmq_queue_messages_ready` with the group's `queue_hash`:
    the metric deploy/hpa/'s adapter rules serve. No prometheus-adapter runs here (see the
    module's docstring): the metric is unavailable, which the HPA reports, and the group keeps
    its pod."""
    namespace = make_namespace("hpa")
    tally = Tally("kubernetes: HPA mode")
    caller: Caller = await make_caller(tally)
    hpa = {"enabled": True, "min_replicas": 1, "max_replicas": 3, "target_value": 5}
    async with kubernetes_controller(
        pool, tmp_path, kube, namespace, driver={"hpa": hpa}
    ) as controller:
        await caller.send(pool, "hot", b"first")
        assert not await caller.settle(COLD), "the first request"
        (autoscaler,) = kube.get("horizontalpodautoscalers", namespace=namespace.name)
        (deployment,) = kube.get("deployments", namespace=namespace.name)
        assert autoscaler["metadata"]["ownerReferences"][0]["uid"] == deployment["metadata"]["uid"]
        metric = autoscaler["spec"]["metrics"][0]["external"]["metric"]
        driver: Any = controller.driver
        assert metric == {
            "name": "rabbitmq_queue_messages_ready",
            "selector": {"matchLabels": {"queue_hash": driver.queue_hash("hot")}},
        }

        def metric_asked() -> str | None:
            (current,) = kube.get("horizontalpodautoscalers", namespace=namespace.name)
            for condition in current.get("status", {}).get("conditions", []):
                if condition["type"] == "ScalingActive" and condition["status"] == "False":
                    return str(condition["reason"]) + ": " + str(condition["message"])
            return None

        said = await eventually(
            metric_asked, timeout=COLD, interval=1, what="the HPA controller read the HPA"
        )
        assert said.startswith("FailedGetExternalMetric"), said
        assert "rabbitmq_queue_messages_ready" in said, said
        assert replicas(kube, namespace.name) == 1

        # Removing the group removes the Deployment; the HPA goes with it.
        await controller.driver.stop("hot")
        await eventually(
            lambda: not kube.get("horizontalpodautoscalers", namespace=namespace.name),
            timeout=COLD, interval=1, what="the HPA gone with its Deployment",
        )  # fmt: skip
