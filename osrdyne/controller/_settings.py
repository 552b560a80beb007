"""Controller settings: a TOML file plus environment overrides, grouped by concern.

One room over 500 lines on purpose: every section of the configuration is one model, read
and checked together (cross-section checks), and docs/configuration.md is generated from it
in the order it is written here.

Sources, strongest first: keyword arguments, environment (`OSRDYNE_<FIELD>`, nested with
`__`, e.g. `OSRDYNE_GROUPS__UNBIND_DELAY=60`), the TOML file, defaults. Every option is
documented in docs/configuration.md.
"""

from __future__ import annotations

import tomllib
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from drivers import registry
from osrdyne import wire
from osrdyne.controller import _config_errors
from osrdyne.exceptions import ConfigurationError

#: A list of addresses, also read from one comma-separated string (environment variables).
AddressList = Annotated[list[str], NoDecode]


def _split_http(value: Any) -> Any:
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, list | tuple):
        found = [str(v).strip() for v in value if str(v).strip()]
        if not found:
            raise ValueError("no management API address given")
        for url in found:
            if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"not an http:// or https:// URL: {url!r}")
        return found
    return value


class AmqpSettings(BaseModel):
    """Where the broker is."""

    model_config = ConfigDict(extra="forbid")

    url: AddressList = Field(
        default=[wire.DEFAULT_URL],
        description="AMQP URIs of the broker's nodes (a list, or one comma-separated string "
        "in the environment); their path is the virtual host, the same for all. The "
        "controller connects to the first that answers and moves to the next when its node "
        "is lost; several addresses mean a cluster (see `queues.initial_group_size`).",
    )
    management_url: AddressList = Field(
        default=["http://127.0.0.1:15672"],
        description="Base URLs of the RabbitMQ management HTTP API, one per node (a list, or "
        "comma-separated); a call that fails on one node is retried on the next. Credentials "
        "of each URL, when it has them, else those of `url`.",
    )
    worker_url: AddressList | None = Field(
        default=None,
        description="AMQP URIs handed to workers as WORKER_AMQP_URI (comma-separated); `url` "
        "when unset.",
    )
    shuffle: bool = Field(
        default=False,
        description="Try the AMQP addresses in a random order (spreads controllers and their "
        "workers over the nodes) instead of the order given.",
    )
    heartbeat: int = Field(
        default=10,
        ge=0,
        le=600,
        description="AMQP heartbeat of the controller's connection, in seconds (0: none), "
        "unless a URL names its own (`?heartbeat=`): a node that stops answering (paused, "
        "cut off) is left for the next address after 3 x (heartbeat + 1) seconds. It is "
        "also the leader's lease: a leader that hears nothing from its node for 1.5 "
        "heartbeats stops acting, and a new leader waits as long before it acts; keep it "
        "below 0.4 x the nodes' `net_ticktime` (docs/operations.md, Partitions). Put "
        "`?heartbeat=N` in the URLs to set it for the workers too.",
    )
    connect_timeout: float = Field(default=10.0, description="Seconds per connection attempt.")
    operation_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a control loop's broker operation (declare, bind, delete) may "
        "take; one that hangs (e.g. on a quorum queue with no online member) is abandoned, its "
        "channel replaced, and retried on the next pass instead of stalling every key. Also "
        "how long a publish of the controller (a forwarded orphan, an answer) waits for its "
        "confirm before it is published again on a fresh channel.",
    )
    management_retry: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a management API call is retried (connection refused, 5xx) "
        "before it fails; a session that fails this way is followed by a new one.",
    )
    startup_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds each start-up stage of a session may take (declaring the "
        "topology and applying the policy; as leader, adopting the queues and attaching the "
        "consumers); one that takes longer (a broker that stopped answering) ends the "
        "session, and a new one follows.",
    )
    stop_grace: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a controller asked to stop (SIGTERM, SIGINT) takes at most to end "
        "its session, whatever stage it is in: in-flight orphans and dead letters get half of "
        "it; whatever still waits on the broker then is abandoned (unacked messages are "
        "redelivered to the next leader). The driver is closed after that.",
    )

    @field_validator("url", "worker_url", mode="before")
    @classmethod
    def _amqp_urls(cls, value: Any) -> Any:
        if value is None or not isinstance(value, str | list | tuple):
            return value
        return wire.split_urls(value)

    @field_validator("management_url", mode="before")
    @classmethod
    def _http_urls(cls, value: Any) -> Any:
        return _split_http(value)

    @model_validator(mode="after")
    def _one_vhost(self) -> AmqpSettings:
        vhosts = {_vhost(url) for url in self.url}
        if len(vhosts) > 1:
            raise ValueError(f"the addresses in `url` name different virtual hosts: {vhosts}")
        return self

    @property
    def clustered(self) -> bool:
        """Several broker addresses: the nodes of a cluster."""
        return len(self.url) > 1

    @property
    def vhost(self) -> str:
        return _vhost(self.url[0])

    @property
    def credentials(self) -> tuple[str, str]:
        parts = urllib.parse.urlsplit(self.url[0])
        return (
            urllib.parse.unquote(parts.username or "guest"),
            urllib.parse.unquote(parts.password or "guest"),
        )


def _vhost(url: str) -> str:
    path = urllib.parse.urlsplit(url).path.lstrip("/")
    return urllib.parse.unquote(path) if path else "/"


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


class BrokerLimitSettings(BaseModel):
    """The broker's limits the controller reads and keeps clear of (`[broker]`)."""

    model_config = ConfigDict(extra="forbid")

    check_interval: float = Field(
        default=5.0,
        gt=0,
        description="Seconds between two readings of the broker's limits (file descriptors, "
        "Erlang processes, alarms, queue count) from the management API.",
    )
    check_timeout: float = Field(
        default=5.0,
        gt=0,
        description="Seconds one reading may take; a reading that fails keeps the last one, "
        "and the queues created since count against it.",
    )
    fds_per_queue: float = Field(
        default=3.5,
        ge=0,
        description="File descriptors of the broker's open-files limit a queue is estimated to "
        "take, counted for every queue the broker holds and every group admitted since the "
        "last reading. RabbitMQ 3.10 at 1024 open files stopped completing handshakes between "
        "300 and 350 quorum queues, though neither its `fd_used` nor its process's open files "
        "grew (docs/benchmarks.md): 3.5 stops new queues at about 256 there.",
    )
    fd_headroom: int = Field(
        default=128,
        ge=0,
        description="File descriptors left free on the broker: a new key that would leave "
        "fewer is answered `overloaded` (reason `broker_fd`), before the broker runs out "
        "and stops accepting connections.",
    )
    processes_per_queue: float = Field(
        default=8.0,
        ge=0,
        description="Erlang processes a new request queue is estimated to take.",
    )
    process_headroom: int = Field(
        default=10_000,
        ge=0,
        description="Erlang processes left free on the broker (reason `broker_processes`).",
    )
    refuse_on_alarm: bool = Field(
        default=True,
        description="Answer new keys `overloaded` while the broker has a memory or disk "
        "alarm (reasons `broker_memory_alarm`, `broker_disk_alarm`): it blocks publishers "
        "then, so a new queue could not be served anyway.",
    )


class QueueSettings(BaseModel):
    """Request queues and the policy the controller applies to them."""

    model_config = ConfigDict(extra="forbid")

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
        "to the poison queue (quorum queues only). None: no limit (written as -1 on "
        "RabbitMQ 4.x, whose quorum queues stop at 20 deliveries when none is set).",
    )
    max_length: int | None = Field(
        default=None,
        ge=1,
        description="Bound on a request queue's length; the oldest requests are dropped "
        "(`drop-head`) and answered `maxlen`.",
    )
    poison_max_length: int = Field(
        default=10_000,
        ge=1,
        description="Most requests kept in the poison queue; the oldest are dropped first "
        "(a flood of bad requests cannot fill the broker).",
    )
    initial_group_size: int | None = Field(
        default=None,
        ge=1,
        description="Replicas of each quorum request queue (`x-quorum-initial-group-size`). "
        "None: 3 when `amqp.url` lists several nodes (a cluster), else the broker's default. "
        "Every controller of a pool must agree: the broker refuses a queue redeclared with "
        "another size.",
    )
    leader_locator: Literal["balanced", "client-local"] | None = Field(
        default=None,
        description="Where a new quorum request queue's leader goes "
        "(`x-queue-leader-locator`, RabbitMQ 3.10+): `balanced` spreads leaders over the "
        "nodes. None: `balanced` on a cluster, else the broker's default.",
    )
    replicate_pool_queues: bool | None = Field(
        default=None,
        description="Declare the pool's own queues (orphan, dead letters, poison, activity) "
        "as quorum queues, replicated over the cluster, so losing a node loses none of "
        "them. None: on a cluster. A pool whose queues already exist as classic queues keeps "
        "them (the broker cannot change a queue's type; a warning says so).",
    )
    policy_priority: int = Field(
        default=10,
        description="Priority of the request-queue and poison-queue policies among the "
        "vhost's policies.",
    )
    leaderless_after: float | None = Field(
        default=20.0,
        gt=0,
        description="Seconds a quorum request queue whose members are all online may show "
        "no leader, at two looks this far apart, before the controller deletes it and "
        "declares it again. RabbitMQ (before 4.x) never elects a leader for a quorum queue "
        "declared just before its node crashed: it exists, takes no publish and no consumer, "
        "and holds nothing (docs/reliability.md). None: never.",
    )
    young_queue_hold: float = Field(
        default=1.0,
        ge=0,
        description="Seconds a new quorum request queue must have existed before the "
        "controller acks an orphan it forwarded into it (the forward is confirmed at once; "
        "only the orphan's ack waits). RabbitMQ brings a quorum queue whose node was killed "
        "before it saved the queue's Raft member name (Ra's directory, saved 0.5 s after "
        "its last change) back as a new, empty member, though it had confirmed a publish "
        "(docs/reliability.md): the orphan, still unacked, is delivered again instead of "
        "lost (a duplicate, at worst). 0: ack at once.",
    )


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
