"""Controller settings: a TOML file plus environment overrides, grouped by concern.

Every section of the configuration is one model; `Settings` holds them all, checks them
together (cross-section checks) and loads them, and docs/configuration.md is generated from
it in the order of its fields. The broker's sections (`amqp`, `queues`, `broker`) are in
`_broker_settings`; the worker groups' (`groups`, `scaling`), the driver's, the API's and the
log's are here.

Sources, strongest first: keyword arguments, environment (`OSRDYNE_<FIELD>`, nested with
`__`, e.g. `OSRDYNE_GROUPS__UNBIND_DELAY=60`), the TOML file, defaults. Every option is
documented in docs/configuration.md.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from drivers import registry
from osrdyne.controller import _config_errors
from osrdyne.controller._broker_settings import AmqpSettings, BrokerLimitSettings, QueueSettings
from osrdyne.exceptions import ConfigurationError


class GroupSettings(BaseModel):
    """Life cycle of worker groups."""

    model_config = ConfigDict(extra="forbid")

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
    stop_drain: float = Field(
        default=10.0,
        ge=0,
        description="Seconds a group an operator stops (`osrdyne stop`, the console) stays "
        "Unbound, draining its queue, before its workers are stopped (at most `stop_delay`).",
    )
    loop_interval: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between control-loop passes without any change (re-lists the "
        "driver's groups, and the request queues when broker events are not heard: "
        "anti-entropy).",
    )
    listing_interval: float = Field(
        default=60.0,
        gt=0,
        description="Seconds between two full listings of the pool's request queues while "
        "broker events (rabbitmq_event_exchange) keep the controller current: the "
        "anti-entropy pass, paged and off the request path, and the age of the queue depths "
        "and placement `/status` shows (`queues_read_at`). Without events the queues are "
        "listed every `loop_interval`, as the events would otherwise say what changed.",
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
    max_groups: int | None = Field(
        default=1000,
        ge=1,
        description="Most worker groups of the pool at once, counting those being started "
        "and those being stopped. A request for a new key beyond it is answered at once "
        "with `x-status: overloaded` (reason `max_groups`); keys that have a group keep "
        "working. None: no cap but the driver's capacity and the broker's limits.",
    )
    stall_after: float = Field(
        default=60.0,
        gt=0,
        description="A group whose requests are delivered and unanswered, with no activity "
        "report for this many seconds, shows as `stalled` in `/status` (workers report "
        "while they work).",
    )
    failing_after: int = Field(
        default=2,
        ge=1,
        description="Failed worker starts within `failing_window` that make a group failing: "
        "a worker's `start-failed` report, or the exit of a worker that never served. A "
        "failing group's requests (those waiting and each new one) are answered at once "
        "with `x-status: start_failed` and the last reason, while the driver keeps "
        "restarting its workers with its back-off; the first worker that serves ends it.",
    )
    failing_window: float = Field(
        default=120.0,
        gt=0,
        description="Seconds within which `failing_after` failed starts make a group failing.",
    )


class ScalingSettings(BaseModel):
    """The group scaler: how many workers each group runs (docs/drivers.md, "Group sizing").

    Only for a driver that sizes groups (subprocess, docker, systemd, kubernetes without
    KEDA/HPA); KEDA and HPA keep their own scaler, noop sizes nothing."""

    model_config = ConfigDict(extra="forbid")

    max_workers: int | None = Field(
        default=None,
        ge=1,
        description="Most workers of one group. None (the default): no scaler, every group "
        "runs the driver's fixed `workers`. 8 suits an echo-like worker (a 50 ms handler, "
        "concurrency 1); a Spark worker holds a JVM and its cache: keep it within what the "
        "machine holds (`memory_per_worker`).",
    )
    min_workers: int = Field(
        default=1,
        ge=1,
        description="Fewest workers of a running group; a new group starts with them.",
    )
    scale_in_window: float = Field(
        default=60.0,
        ge=0,
        description="Seconds a lower need must hold before a group shrinks to it (the "
        "highest need of the window is kept, as the HPA's scale-down stabilisation window). "
        "Growing is never delayed.",
    )
    target_busy: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Share of its time a worker should be busy at the arrival rate: the "
        "headroom left for a burst.",
    )
    drain_seconds: float = Field(
        default=2.0,
        gt=0,
        description="Seconds a group should take to drain its backlog, on top of serving its "
        "arrivals: a smaller value grows a group harder on a backlog.",
    )
    interval: float = Field(
        default=1.0,
        gt=0,
        description="Seconds between two readings of a busy group's backlog; a worker's "
        "report of new work wakes the scaler at once.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> ScalingSettings:
        if self.max_workers is not None and self.min_workers > self.max_workers:
            raise ValueError(
                f"scaling.min_workers ({self.min_workers}) is above scaling.max_workers "
                f"({self.max_workers})"
            )
        return self


class DriverSettings(BaseModel):
    """Which driver runs worker groups; each driver reads its own section, listed below."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(
        default="subprocess",
        description="The worker-group driver: " + ", ".join(f"`{k}`" for k in registry.KINDS) + ".",
    )
    sections: dict[str, BaseModel] = Field(
        default_factory=dict,
        exclude=True,
        description="The `[driver.<section>]` tables, validated by their drivers' models.",
    )

    @model_validator(mode="before")
    @classmethod
    def _sections_by_driver(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        values = dict(values)
        given = {k: values.pop(k) for k in list(values) if k not in ("kind", "sections")}
        sections = dict(values.get("sections", {}))
        for name, options in given.items():
            try:
                sections.update(registry.parse_sections({name: options}))
            except ValidationError as exc:  # said here, where the section's name is known
                model = registry.SECTIONS[name]
                raise ValueError(
                    _config_errors.explain(exc, model, prefix=f"driver.{name}")
                ) from None
        values["sections"] = sections
        return values

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        return registry.check_kind(kind)

    def section(self, name: str) -> BaseModel | None:
        """The options of `[driver.<name>]`, None when the file has no such section."""
        return self.sections.get(name)


class ApiSettings(BaseModel):
    """The controller's HTTP API (health, status, metrics)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="Serve the HTTP API.")
    host: str = Field(default="127.0.0.1", description="Address the API binds to.")
    port: int = Field(default=8090, ge=0, le=65535, description="Port (0: any free port).")
    token: str | None = Field(
        default=None,
        description="Bearer token required on every endpoint but /health and the console's "
        "page and assets (which hold no data).",
    )
    advertise_url: str | None = Field(
        default=None,
        description="Base URL of this API as other controllers of the pool show it (a "
        "standby refusing an action points to the leader's). Default: `http://` + `host` "
        "(this machine's name when bound to every address) + `:` + the bound port.",
    )
    scaling_backlog_per_consumer: float = Field(
        default=10.0,
        ge=0,
        description="`/pulse/scaling` answers 503 when a group has more ready requests per "
        "consumer than this (any ready request with no consumer counts as over).",
    )


class LogSettings(BaseModel):
    """Log lines of the controller (and of the workers it starts on its machine)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    level: str = Field(default="INFO", description="Log level.")
    json_format: bool = Field(default=False, alias="json", description="One JSON object a line.")


class Settings(BaseSettings):
    """Everything a controller of one pool needs."""

    model_config = SettingsConfigDict(
        env_prefix="OSRDYNE_", env_nested_delimiter="__", extra="forbid", populate_by_name=True
    )

    pool: str = Field(
        default="demo",
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9_.:@-]+$",
        description="The worker pool this controller runs: letters, digits and `_.:@-` (its "
        "exchange and queue names must be accepted by every AMQP client).",
    )
    amqp: AmqpSettings = Field(default_factory=AmqpSettings)
    groups: GroupSettings = Field(default_factory=GroupSettings)
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    queues: QueueSettings = Field(default_factory=QueueSettings)
    broker: BrokerLimitSettings = Field(default_factory=BrokerLimitSettings)
    driver: DriverSettings = Field(default_factory=DriverSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    log: LogSettings = Field(default_factory=LogSettings)

    @model_validator(mode="after")
    def _cluster_defaults(self) -> Settings:
        """Queue placement left to None follows the broker: replicated and spread on a
        cluster (several addresses), the broker's defaults on one node."""
        q = self.queues
        cluster = self.amqp.clustered
        defaults: dict[str, Any] = {
            "initial_group_size": 3 if cluster else None,
            "leader_locator": "balanced" if cluster else None,
            "replicate_pool_queues": cluster,
        }
        updates = {k: v for k, v in defaults.items() if getattr(q, k) is None and v is not None}
        if updates:
            self.queues = q.model_copy(update=updates)
        return self

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
        """Settings from the TOML file at `path` (if any) under environment overrides.

        Raises `ConfigurationError` with a one-line explanation: the file is missing or not
        TOML, an option is unknown (with the nearest valid name) or has a wrong value.
        """
        if path is not None and not Path(path).is_file():
            raise ConfigurationError(f"configuration file {str(path)!r} does not exist")
        config = {**cls.model_config, "toml_file": path} if path is not None else cls.model_config
        bound = type(cls.__name__, (cls,), {"model_config": config})
        try:
            return bound()  # type: ignore[no-any-return]
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(
                f"configuration file {str(path)!r} is not TOML: {exc}"
            ) from exc
        except ValidationError as exc:
            where = f"configuration file {str(path)!r}" if path is not None else "configuration"
            raise ConfigurationError(f"{where}: {_config_errors.explain(exc, cls)}") from exc
