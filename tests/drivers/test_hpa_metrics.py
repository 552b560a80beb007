"""The metric an HPA of HPA mode reads, made by a real RabbitMQ and a real Prometheus.

HPA mode names a request queue in its HPA's metric selector by `queue_hash`, a label that
Prometheus adds at scrape time (deploy/hpa/prometheus-scrape.yaml) and the driver computes on
its side (`drivers.kubernetes.queue_hash`). Both must agree for every key, or an HPA reads
nothing. So this test runs the parts for real: a private RabbitMQ node (the Debian package,
with its rabbitmq_prometheus plugin) holding the request queues of hostile keys with known
depths, and Prometheus (Debian's `prometheus` package, installed here when missing) scraping
it with the shipped configuration, checked by `promtool` first. It then asks Prometheus the
query prometheus-adapter makes from deploy/hpa/adapter-config.yaml for each HPA's selector
(the adapter's `<<.Series>>` / `<<.LabelMatchers>>` template, rendered as the adapter renders
it) and expects each queue's depth. prometheus-adapter itself is not run (it cannot be built
here); the real HPA controller asking for this metric is in tests/kubernetes/test_autoscalers.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import yaml

from drivers import base
from drivers import kubernetes as kubernetes_driver
from tests.docker_engine import _unavailable
from tests.faults.rabbit_node import NodeError, RabbitNode, free_port

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
HPA_DIR = REPO / "deploy" / "hpa"
POOL = "hpa-metrics"
#: Keys and the depth of their request queues (readable, escaped, hashed queue names).
DEPTHS = {"hello": 3, "Infra/42 é — spaces & ünïcode": 5, "a;b": 2, "x" * 255: 7}
#: Bound on waiting for Prometheus to have scraped what the broker holds (not a measure).
SCRAPE_WAIT = 90.0


class PrometheusRabbitNode(RabbitNode):
    """A private node that also serves rabbitmq_prometheus on a port of its own."""

    def __init__(self, base_dir: Path, **kwargs: Any) -> None:
        self.prometheus_port = free_port()
        super().__init__(base_dir, **kwargs)

    def _write_files(self) -> None:
        super()._write_files()
        (self.base / "enabled_plugins").write_text(
            "[rabbitmq_management,rabbitmq_event_exchange,rabbitmq_prometheus].\n"
        )
        with (self.base / "rabbitmq.conf").open("a") as conf:
            conf.write(f"prometheus.tcp.port = {self.prometheus_port}\n")
            conf.write("prometheus.tcp.ip = 127.0.0.1\n")


@pytest.fixture(scope="module")
def prometheus_binaries() -> tuple[str, str]:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            for command in (
                ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
            ):
                subprocess.run(command, check=True, capture_output=True, env=env, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            _unavailable(f"cannot install Debian's prometheus package: {exc}")
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        _unavailable("the prometheus package installed no prometheus/promtool")
    assert prometheus is not None and promtool is not None
    return prometheus, promtool


@pytest.fixture(scope="module")
def rabbit() -> Iterator[PrometheusRabbitNode]:
    import tempfile

    node = PrometheusRabbitNode(Path(tempfile.mkdtemp(prefix="osrdyne-rabbit-prom-")))
    try:
        node.start()
    except NodeError as exc:
        node.close()
        pytest.fail(f"cannot start a private RabbitMQ node: {exc}")
    try:
        yield node
    finally:
        node.close()


async def _fill_queues(amqp_url: str) -> None:
    names = base.PoolContext(pool=POOL, amqp_uri=amqp_url).names
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        for key, depth in DEPTHS.items():
            queue = names.request_queue(key)
            await channel.declare_queue(
                queue, durable=True, arguments=names.request_queue_arguments(key)
            )
            for i in range(depth):
                await channel.default_exchange.publish(
                    aio_pika.Message(f"{i}".encode()), routing_key=queue
                )


def _scrape_config(tmp_path: Path, target: str) -> Path:
    shipped = yaml.safe_load((HPA_DIR / "prometheus-scrape.yaml").read_text())
    (job,) = shipped["scrape_configs"]
    job["static_configs"] = [{"targets": [target]}]
    job["scrape_interval"] = "1s"
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, **shipped}))
    return path


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=10
    ) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]  # type: ignore[no-any-return]


def _adapter_query(labels: dict[str, str]) -> str:
    """The PromQL prometheus-adapter sends for an External metric selected by `labels`."""
    config_map = yaml.safe_load((HPA_DIR / "adapter-config.yaml").read_text())
    (rule,) = yaml.safe_load(config_map["data"]["config.yaml"])["externalRules"]
    series = rule["seriesQuery"].split("{", 1)[0]
    matchers = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    query: str = rule["metricsQuery"]
    return query.replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)


@pytest.mark.slow
def test_prometheus_gives_each_hpa_its_queue_depth(
    prometheus_binaries: tuple[str, str], rabbit: PrometheusRabbitNode, tmp_path: Path
) -> None:
    prometheus, promtool = prometheus_binaries
    asyncio.run(_fill_queues(rabbit.amqp_url))
    config = _scrape_config(tmp_path, f"127.0.0.1:{rabbit.prometheus_port}")
    checked = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        driver = kubernetes_driver.KubernetesDriver(
            base.PoolContext(pool=POOL, amqp_uri=rabbit.amqp_url),
            kubernetes_driver.KubernetesSettings(hpa={"enabled": True}),
        )
        queries = {}
        for key in DEPTHS:
            hpa = driver.horizontal_pod_autoscaler(key, owner_uid="uid")
            metric = hpa["spec"]["metrics"][0]["external"]["metric"]
            assert metric["name"] == "rabbitmq_queue_messages_ready"
            queries[key] = _adapter_query(metric["selector"]["matchLabels"])
        seen: dict[str, float] = {}
        deadline = time.monotonic() + SCRAPE_WAIT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                for key, promql in queries.items():
                    result = _query(url, promql)
                    if result:
                        seen[key] = float(result[0]["value"][1])
            except OSError:
                pass  # not listening yet
            if seen == {k: float(v) for k, v in DEPTHS.items()}:
                break
            time.sleep(0.5)
        log.flush()
        assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
        assert seen == {k: float(v) for k, v in DEPTHS.items()}, (
            seen,
            _query(url, "rabbitmq_detailed_queue_messages_ready"),
        )
        # Every series of our queues carries the label the driver computes for it.
        names = driver._context.names
        for series in _query(url, "rabbitmq_detailed_queue_messages_ready"):
            labels = series["metric"]
            if labels["queue"].startswith(names.request_queue_prefix):
                assert labels["queue_hash"] == kubernetes_driver.queue_hash(
                    labels["vhost"], labels["queue"]
                )
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
