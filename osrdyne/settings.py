"""Controller settings: a TOML file plus environment overrides, grouped by concern.

Sources, strongest first: keyword arguments, environment (`OSRDYNE_<FIELD>`, nested with
`__`, e.g. `OSRDYNE_GROUPS__UNBIND_DELAY=60`), the TOML file, defaults. Every option is
documented in docs/configuration.md.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from drivers.docker import DockerSettings
from drivers.kubernetes import KubernetesSettings
from drivers.subprocess import SubprocessSettings

DriverKind = Literal["subprocess", "noop", "docker", "kubernetes", "keda"]


class AmqpSettings(BaseModel):
    """Where the broker is."""

    url: str = Field(
        default="amqp://guest:guest@127.0.0.1:5672/%2F",
        description="AMQP URI of the broker; its path is the virtual host.",
    )
    management_url: str = Field(
        default="http://127.0.0.1:15672",
        description="Base URL of the RabbitMQ management HTTP API (credentials come from `url`).",
    )
    worker_url: str | None = Field(
        default=None,
        description="AMQP URI handed to workers as WORKER_AMQP_URI; `url` when unset.",
    )
    connect_timeout: float = Field(default=10.0, description="Seconds per connection attempt.")
    operation_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a control loop's broker operation (declare, bind, delete) may "
        "take; one that hangs (e.g. on a quorum queue with no online member) is abandoned, its "
        "channel replaced, and retried on the next pass instead of stalling every key.",
    )

    @property
    def vhost(self) -> str:
        path = urllib.parse.urlsplit(self.url).path.lstrip("/")
        return urllib.parse.unquote(path) if path else "/"

    @property
    def credentials(self) -> tuple[str, str]:
        parts = urllib.parse.urlsplit(self.url)
        return (
            urllib.parse.unquote(parts.username or "guest"),
            urllib.parse.unquote(parts.password or "guest"),
        )


class GroupSettings(BaseModel):
    """Life cycle of worker groups."""

    unbind_delay: float = Field(
        default=300.0,
        gt=0,
        description="Seconds without activity before a group's queue is unbound.",
    )
    stop_delay: float = Field(
        default=300.0,
        gt=0,
        description="Seconds a group stays Unbound (rebound by any activity) before it is "
        "stopped and its queue deleted.",
    )
    loop_interval: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between control-loop passes without any change (re-lists queues "
        "and groups: anti-entropy).",
    )
    activity_fold: float = Field(
        default=1.0,
        ge=0,
        description="Activity events of one key closer than this many seconds are folded "
        "into one tracker update.",
    )
    orphan_wait_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds an orphan waits for its queue before it is requeued for later.",
    )
    orphan_prefetch: int = Field(default=256, ge=1, description="Orphans handled at once.")


class QueueSettings(BaseModel):
    """Request queues and the policy the controller applies to them."""

    type: Literal["quorum", "classic"] = Field(
        default="quorum",
        description="Request queue type. Classic queues have no delivery limit (no poison "
        "detection) and lose messages if their node is lost.",
    )
    message_ttl: float | None = Field(
        default=600.0,
        gt=0,
        description="Seconds a request may wait in a request queue before it dies as "
        "`expired` (and is answered). None: no limit.",
    )
    delivery_limit: int | None = Field(
        default=5,
        ge=1,
        description="Deliveries of one request before it dies as `delivery_limit` and goes "
        "to the poison queue (quorum queues only).",
    )
    max_length: int | None = Field(
        default=None,
        ge=1,
        description="Bound on a request queue's length; the oldest requests are dropped "
        "(`drop-head`) and answered `maxlen`.",
    )
    policy_priority: int = Field(
        default=10, description="Priority of the request-queue policy among the vhost's policies."
    )


class DriverSettings(BaseModel):
    """Which driver runs worker groups, and each driver's own options."""

    kind: DriverKind = Field(default="subprocess", description="The worker-group driver.")
    subprocess: SubprocessSettings = Field(default_factory=SubprocessSettings)
    docker: DockerSettings | None = Field(
        default=None, description="Options of the docker driver (`[driver.docker]`)."
    )
    kubernetes: KubernetesSettings | None = Field(
        default=None,
        description="Options of the kubernetes and keda drivers (`[driver.kubernetes]`).",
    )


class ApiSettings(BaseModel):
    """The controller's HTTP API (health, status, metrics)."""

    enabled: bool = Field(default=True, description="Serve the HTTP API.")
    host: str = Field(default="127.0.0.1", description="Address the API binds to.")
    port: int = Field(default=8090, ge=0, le=65535, description="Port (0: any free port).")
    token: str | None = Field(
        default=None, description="Bearer token required on every endpoint but /health."
    )
    scaling_backlog_per_consumer: float = Field(
        default=10.0,
        ge=0,
        description="`/pulse/scaling` answers 503 when a group has more ready requests per "
        "consumer than this (any ready request with no consumer counts as over).",
    )


class LogSettings(BaseModel):
    level: str = Field(default="INFO", description="Log level.")
    json_format: bool = Field(default=False, alias="json", description="One JSON object a line.")


class Settings(BaseSettings):
    """Everything a controller of one pool needs."""

    model_config = SettingsConfigDict(
        env_prefix="OSRDYNE_", env_nested_delimiter="__", extra="forbid", populate_by_name=True
    )

    pool: str = Field(
        default="demo", min_length=1, description="The worker pool this controller runs."
    )
    amqp: AmqpSettings = Field(default_factory=AmqpSettings)
    groups: GroupSettings = Field(default_factory=GroupSettings)
    queues: QueueSettings = Field(default_factory=QueueSettings)
    driver: DriverSettings = Field(default_factory=DriverSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    log: LogSettings = Field(default_factory=LogSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    @classmethod
    def load(cls, path: Path | str | None = None) -> Settings:
        """Settings from the TOML file at `path` (if any) under environment overrides."""
        if path is None:
            return cls()
        if not Path(path).is_file():
            raise FileNotFoundError(f"configuration file {path} does not exist")
        bound = type(
            cls.__name__, (cls,), {"model_config": {**cls.model_config, "toml_file": path}}
        )
        return bound()  # type: ignore[no-any-return]
