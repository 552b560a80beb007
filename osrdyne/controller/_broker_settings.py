"""The controller's settings of the broker, one model a section: how to reach it (`amqp`), the
request queues it declares there (`queues`), and the limits it keeps the broker within
(`broker`). `Settings` (`_settings`) holds them with the other sections; docs/configuration.md
is generated from the models.
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from osrdyne import wire

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
