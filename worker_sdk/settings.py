"""The worker's configuration, read once from the environment every driver sets.

The protocol variables (`WORKER_ID`, `WORKER_KEY`, ...) are required; the tuning ones have
defaults and are optional, so an OSRD core worker's environment is enough to run. A standby
worker has `WORKER_STANDBY_QUEUE` instead of a key and a request queue: it learns both from
its assignment (docs/protocol.md).

Read with the standard library, where the controller's settings use pydantic-settings: a
worker started for a never-seen key imports all it needs before its first answer, and
pydantic with pydantic-settings took 55-60 ms of the SDK's 190 ms import, for a dozen
variables of four types (docs/benchmarks.md, "Cold key"). Every value is still checked at
start, and every problem is named at once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from collections.abc import Mapping
from typing import Any

from osrdyne import wire

#: Every setting `name` is read from `WORKER_<NAME>`.
ENV_PREFIX = "WORKER_"

#: What each type of setting is called in a problem.
_KINDS: dict[Any, str] = {str: "text", int: "an integer", float: "a number", bool: "a boolean"}
_TRUE = frozenset({"1", "true", "yes", "on", "t", "y"})
_FALSE = frozenset({"0", "false", "no", "off", "f", "n"})


class SettingsError(ValueError):
    """The worker's settings are not usable: every problem, one a line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid worker settings:\n  " + "\n  ".join(problems))


def _setting(
    default: Any = dataclasses.MISSING,
    *,
    doc: str,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
) -> Any:
    """A field with its description (docs/configuration.md is generated from it) and bounds."""
    return dataclasses.field(default=default, metadata={"doc": doc, "ge": ge, "gt": gt, "le": le})


@dataclasses.dataclass(kw_only=True)
class WorkerSettings:
    """Settings of one worker process; every field is read from `WORKER_<NAME>`."""

    id: str = _setting(doc="Unique identifier of this worker (WORKER_ID).")
    key: str = _setting(
        "",
        doc="The worker key this worker's group serves (WORKER_KEY); a standby worker gets it "
        "from its assignment.",
    )
    pool: str = _setting(doc="The worker pool (WORKER_POOL).")
    requests_queue: str = _setting(
        "",
        doc="Queue to consume requests from; a standby worker gets it from its assignment.",
    )
    standby_queue: str | None = _setting(
        None,
        doc="Set by a driver that starts this worker as a standby (WORKER_STANDBY_QUEUE): wait "
        "there for the assignment naming the key, take no request before it.",
    )
    activity_exchange: str = _setting(doc="Exchange activity reports are published to.")
    amqp_uri: str = _setting(
        wire.DEFAULT_URL,
        doc="Broker URI (WORKER_AMQP_URI); the nodes of a cluster comma-separated: the worker "
        "connects to the first that answers and moves to the next when its node is lost.",
    )
    concurrency: int = _setting(
        4, ge=1, doc="Requests handled at once; also the consumer prefetch."
    )
    activity_interval: float = _setting(
        5.0,
        gt=0,
        doc="At most one `request-received` report per this many seconds; a busy worker also "
        "reports once per interval while requests are in flight.",
    )
    handler_timeout: float = _setting(
        600.0,
        gt=0,
        doc="Seconds a handler may run when the caller's deadline (plus `stall_grace`) does "
        "not come first; past it the request is answered `worker_error` (reason `timeout`) "
        "and its slot freed.",
    )
    stall_grace: float = _setting(
        30.0,
        ge=0,
        doc="Seconds past the caller's deadline a handler may still answer; and seconds a "
        "handler thread may outlive its limit before the worker ends itself (exit code 70) "
        "so its driver restarts it.",
    )
    drain_timeout: float = _setting(
        30.0, ge=0, doc="Seconds in-flight requests get to finish on SIGTERM."
    )
    error_status: str = _setting(
        "worker_error",
        doc="`x-status` of a response to a handler's failure (OSRD core: core_error).",
    )
    metrics_port: int | None = _setting(
        None,
        ge=0,
        le=65535,
        doc="Serve this worker's Prometheus metrics on 127.0.0.1 at this port "
        "(WORKER_METRICS_PORT); unset: not served.",
    )
    log_level: str = _setting("INFO", doc="Log level of `Worker.run` (WORKER_LOG_LEVEL).")
    log_json: bool = _setting(
        False,
        doc="Log one JSON object a line, as the controller does with `log.json` "
        "(WORKER_LOG_JSON). `osrdyne run` with `log.json = true` sets it for the workers it "
        "starts on its machine (subprocess driver) unless it is set already.",
    )
    queue_wait_timeout: float = _setting(
        120.0,
        gt=0,
        doc="Seconds to wait at start for the request queue to exist before giving up.",
    )
    queue_missing_move_after: float = _setting(
        10.0,
        gt=0,
        doc="Seconds the request queue may be missing (NOT_FOUND) on the broker node this "
        "worker is connected to, while the worker waits to consume it, before it moves to the "
        "next broker address (a node whose metadata stayed partitioned from the others after "
        "a freeze does not see the queues declared on them); again after as long on each. "
        "Only with several addresses; the whole wait is still bounded by `queue_wait_timeout`.",
    )
    consumer_lost_after: float = _setting(
        15.0,
        gt=0,
        doc="Seconds the broker may hold no consumer of this worker on the request queue while "
        "the worker's connection is up (cancelled when the queue was deleted, a restore that "
        "failed) before the worker consumes again on a new channel, waiting up to "
        "`queue_wait_timeout` for the queue; it ends itself (exit code 70) if that fails.",
    )

    def __post_init__(self) -> None:
        hints = _hints()
        problems = [
            problem
            for field in dataclasses.fields(self)
            if (problem := _problem(field, hints[field.name], getattr(self, field.name)))
        ]
        if self.standby_queue is None and not (self.key and self.requests_queue):
            problems.append(
                "WORKER_KEY and WORKER_REQUESTS_QUEUE are required (or WORKER_STANDBY_QUEUE "
                "for a standby worker)"
            )
        if isinstance(self.amqp_uri, str):
            try:  # checked here, at start, not at the first connection
                self.amqp_uri = wire.join_urls(self.amqp_uri)
            except ValueError as exc:
                problems.append(f"amqp_uri ({ENV_PREFIX}AMQP_URI): {exc}")
        if problems:
            raise SettingsError(problems)
        # An int is a float: stored as one, so that the settings read alike however given.
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if hints[field.name] is float and not isinstance(value, float):
                setattr(self, field.name, float(value))

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> WorkerSettings:
        """The settings in `environ` (the process's environment by default), `overrides`
        winning; unknown `WORKER_*` variables are ignored (drivers set some of their own). An
        empty value leaves an optional setting unset."""
        environ = os.environ if environ is None else environ
        hints = _hints()
        values: dict[str, Any] = {}
        problems: list[str] = []
        for field in dataclasses.fields(cls):
            variable = ENV_PREFIX + field.name.upper()
            if field.name in overrides or variable not in environ:
                if field.name not in overrides and _required(field):
                    problems.append(f"{variable} is required")
                continue
            try:
                values[field.name] = _parse(hints[field.name], environ[variable])
            except ValueError as exc:
                problems.append(f"{variable}={environ[variable]!r}: {exc}")
        if problems:
            raise SettingsError(problems)
        return cls(**values, **overrides)


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(WorkerSettings)


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _optional(hint: Any) -> Any:
    """`X` of `X | None`, else None."""
    args = typing.get_args(hint)
    if type(None) in args:
        return next(arg for arg in args if arg is not type(None))
    return None


def _parse(hint: Any, text: str) -> Any:
    """`text` (an environment variable's value) as a value of type `hint`."""
    inner = _optional(hint)
    if inner is not None:
        return None if text.strip() == "" else _parse(inner, text)
    if hint is bool:
        word = text.strip().lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
        raise ValueError("not a boolean (true/false, yes/no, on/off, 1/0)")
    if hint is int:
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError("not an integer") from None
    if hint is float:
        try:
            return float(text.strip())
        except ValueError:
            raise ValueError("not a number") from None
    return text


def _problem(field: dataclasses.Field[Any], hint: Any, value: Any) -> str | None:
    """What is wrong with `value` for `field`, or None."""
    name = f"{field.name} ({ENV_PREFIX}{field.name.upper()})"
    inner = _optional(hint)
    if inner is not None:
        if value is None:
            return None
        hint = inner
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            return f"{name}: {value!r} is not a finite number"
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    if not ok:
        return f"{name}: {value!r} is not {_KINDS[hint]}"
    bounds = field.metadata
    if bounds["ge"] is not None and value < bounds["ge"]:
        return f"{name}: {value!r} is less than {bounds['ge']}"
    if bounds["gt"] is not None and value <= bounds["gt"]:
        return f"{name}: {value!r} is not greater than {bounds['gt']}"
    if bounds["le"] is not None and value > bounds["le"]:
        return f"{name}: {value!r} is greater than {bounds['le']}"
    return None
