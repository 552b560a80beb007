"""The settings of the docker driver (`[driver.docker]`); they import without the Docker SDK."""

from __future__ import annotations

from typing import Literal

import pydantic
from pydantic import Field


class VolumeMount(pydantic.BaseModel):
    """A bind mount into every worker container."""

    model_config = pydantic.ConfigDict(extra="forbid")

    source: str = Field(description="Path on the Docker host (or a named volume).")
    target: str = Field(description="Path inside the container.")
    read_only: bool = Field(default=False, description="Mount read-only.")


class DockerSettings(pydantic.BaseModel):
    """Settings of the docker driver (`[driver.docker]` in the controller's configuration)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    base_url: str | None = Field(
        default=None,
        description="Docker engine URL, e.g. unix:///run/docker.sock or tcp://host:2375. "
        "None: DOCKER_HOST (and DOCKER_TLS_VERIFY/DOCKER_CERT_PATH) from the environment, "
        "else the standard socket unix:///var/run/docker.sock.",
    )
    api_version: str = Field(
        default="auto", description="Docker API version to speak; 'auto' asks the engine."
    )
    timeout: float = Field(default=60.0, gt=0, description="Seconds per engine API call.")
    image: str = Field(default="osrdyne-worker:latest", description="Worker image.")
    pull: Literal["never", "missing"] = Field(
        default="missing",
        description="Pull the image when the engine does not have it ('missing') or fail.",
    )
    command: list[str] | None = Field(
        default=None, description="Command (argv) of the workers; None: the image's CMD."
    )
    entrypoint: list[str] | None = Field(
        default=None, description="Entrypoint override; None: the image's ENTRYPOINT."
    )
    workers: int = Field(default=1, ge=1, description="Containers per worker group.")
    max_containers: int | None = Field(
        default=None,
        ge=1,
        description="Most worker containers at once, every group counted; new keys beyond "
        "it are answered `overloaded` (reason `driver_capacity`). None: no cap of the "
        "driver's own (the controller's `groups.max_groups` still holds).",
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment of the workers; the protocol's WORKER_* variables "
        "are always set by the driver and win over these.",
    )
    network_mode: str = Field(
        default="host", description="Docker network mode of the workers (host, bridge, ...)."
    )
    volumes: list[VolumeMount] = Field(default_factory=list, description="Bind mounts.")
    working_dir: str | None = Field(default=None, description="Working directory; None: image's.")
    user: str | None = Field(default=None, description="User to run as; None: the image's.")
    cpus: float | None = Field(
        default=None, gt=0, description="CPU limit per container (e.g. 1.5); None: no limit."
    )
    memory: str | None = Field(
        default=None, description="Memory limit per container (e.g. '2g'); None: no limit."
    )
    restart_policy: Literal["no", "always", "unless-stopped", "on-failure"] = Field(
        default="unless-stopped", description="Docker restart policy of the workers."
    )
    restart_max_retries: int = Field(
        default=5, ge=0, description="Restarts before giving up, with restart_policy=on-failure."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra container labels (osrdyne.* are reserved)."
    )
    standby: int = Field(
        default=0,
        ge=0,
        description="Standby containers kept running ahead of demand, not yet keyed: a new key "
        "takes one (and a replacement is started) instead of waiting for a container to "
        "start. Only for a command that supports the standby protocol (`worker_sdk` does; "
        "see docs/protocol.md); 0: each container is started for its key. They count "
        "against `max_containers`.",
    )
    stop_timeout: int = Field(
        default=30, ge=0, description="Seconds between SIGTERM and SIGKILL when stopping."
    )
