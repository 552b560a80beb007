"""The one place that picks a driver by name (drivers never import each other)."""

from __future__ import annotations

from drivers.base import Driver, PoolContext
from osrdyne.exceptions import ConfigurationError
from osrdyne.settings import Settings


def make_driver(settings: Settings) -> Driver:
    context = PoolContext(
        pool=settings.pool, amqp_uri=settings.amqp.worker_url or settings.amqp.url
    )
    kind = settings.driver.kind
    if kind == "subprocess":
        from drivers.subprocess import SubprocessDriver

        return SubprocessDriver(context, settings.driver.subprocess)
    if kind == "noop":
        from drivers.noop import NoopDriver

        return NoopDriver(context)
    if kind == "docker":
        from drivers.docker import DockerDriver

        if settings.driver.docker is None:
            raise ConfigurationError("driver 'docker' needs a [driver.docker] section")
        return DockerDriver(context, settings.driver.docker)
    if kind in ("kubernetes", "keda"):
        from drivers.kubernetes import KubernetesDriver

        k8s = settings.driver.kubernetes
        if k8s is None:
            raise ConfigurationError(f"driver {kind!r} needs a [driver.kubernetes] section")
        if kind == "keda" and not k8s.keda.enabled:
            k8s = k8s.model_copy(update={"keda": k8s.keda.model_copy(update={"enabled": True})})
        return KubernetesDriver(context, k8s)
    raise ConfigurationError(f"unknown driver {kind!r}")
