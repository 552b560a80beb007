"""The worker's configuration, read once from the environment every driver sets.

The protocol variables (`WORKER_ID`, `WORKER_KEY`, ...) are required; the tuning ones have
defaults and are optional, so an OSRD core worker's environment is enough to run. A standby
worker has `WORKER_STANDBY_QUEUE` instead of a key and a request queue: it learns both from
its assignment (docs/protocol.md).
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from osrdyne import wire


class WorkerSettings(BaseSettings):
    """Settings of one worker process; every field is read from `WORKER_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="WORKER_", extra="ignore")

    id: str = Field(description="Unique identifier of this worker (WORKER_ID).")
    key: str = Field(
        default="",
        description="The worker key this worker's group serves (WORKER_KEY); a standby "
        "worker gets it from its assignment.",
    )
    pool: str = Field(description="The worker pool (WORKER_POOL).")
    requests_queue: str = Field(
        default="",
        description="Queue to consume requests from; a standby worker gets it from its assignment.",
    )
    standby_queue: str | None = Field(
        default=None,
        description="Set by a driver that starts this worker as a standby "
        "(WORKER_STANDBY_QUEUE): wait there for the assignment naming the key, take no "
        "request before it.",
    )
    activity_exchange: str = Field(description="Exchange activity reports are published to.")
    amqp_uri: str = Field(
        default=wire.DEFAULT_URL,
        description="Broker URI (WORKER_AMQP_URI); the nodes of a cluster comma-separated: "
        "the worker connects to the first that answers and moves to the next when its node "
        "is lost.",
    )
    concurrency: int = Field(
        default=4, ge=1, description="Requests handled at once; also the consumer prefetch."
    )
    activity_interval: float = Field(
        default=5.0,
        gt=0,
        description="At most one `request-received` report per this many seconds; a busy "
        "worker also reports once per interval while requests are in flight.",
    )
    handler_timeout: float = Field(
        default=600.0,
        gt=0,
        description="Seconds a handler may run when the caller's deadline (plus "
        "`stall_grace`) does not come first; past it the request is answered `worker_error` "
        "(reason `timeout`) and its slot freed.",
    )
    stall_grace: float = Field(
        default=30.0,
        ge=0,
        description="Seconds past the caller's deadline a handler may still answer; and "
        "seconds a handler thread may outlive its limit before the worker ends itself (exit "
        "code 70) so its driver restarts it.",
    )
    drain_timeout: float = Field(
        default=30.0, ge=0, description="Seconds in-flight requests get to finish on SIGTERM."
    )
    error_status: str = Field(
        default="worker_error",
        description="`x-status` of a response to a handler's failure (OSRD core: core_error).",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve this worker's Prometheus metrics on 127.0.0.1 at this port "
        "(WORKER_METRICS_PORT); unset: not served.",
    )
    log_level: str = Field(
        default="INFO", description="Log level of `Worker.run` (WORKER_LOG_LEVEL)."
    )
    log_json: bool = Field(
        default=False,
        description="Log one JSON object a line, as the controller does with `log.json` "
        "(WORKER_LOG_JSON). `osrdyne run` with `log.json = true` sets it for the workers it "
        "starts on its machine (subprocess driver) unless it is set already.",
    )
    queue_wait_timeout: float = Field(
        default=120.0,
        gt=0,
        description="Seconds to wait at start for the request queue to exist before giving up.",
    )

    @model_validator(mode="after")
    def _keyed_or_standby(self) -> Self:
        if self.standby_queue is None and not (self.key and self.requests_queue):
            raise ValueError(
                "WORKER_KEY and WORKER_REQUESTS_QUEUE are required (or WORKER_STANDBY_QUEUE "
                "for a standby worker)"
            )
        return self

    @field_validator("amqp_uri")
    @classmethod
    def _addresses(cls, value: str) -> str:
        return wire.join_urls(value)  # checked here, at start, not at the first connection
