"""The wire protocol, in one place.

Every name other implementations must agree on (exchanges, queues, headers, statuses, worker
environment variables) is defined here and nowhere else, so the controller, the client, the
worker SDK and the drivers cannot drift apart. See docs/protocol.md.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any

import aio_pika
import pamqp.common
import pamqp.constants
import pamqp.decode

#: Longest routing key AMQP 0.9.1 can carry (a shortstr), in bytes.
MAX_KEY_BYTES = 255
#: Longest queue name RabbitMQ accepts, in bytes.
MAX_QUEUE_NAME_BYTES = 255

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


def reply_delivery_mode(reply_to: str) -> aio_pika.DeliveryMode:
    """AMQP delivery mode of an answer to `reply_to`: persistent (2) to a named queue, so the
    answer outlives a broker restart with its queue; transient (1) to a direct reply-to
    address, which has no queue to keep it in."""
    if reply_to.startswith(DIRECT_REPLY_TO):
        return aio_pika.DeliveryMode.NOT_PERSISTENT
    return aio_pika.DeliveryMode.PERSISTENT


class Header(enum.StrEnum):
    """AMQP header names of the protocol."""

    STATUS = "x-status"
    RPC_PATH = "x-rpc-path"
    NON_TERMINATING = "x-non-terminating-response"
    EVENT = "x-event"
    WORKER_ID = "x-worker-id"
    DEADLINE = "x-deadline"
    FIRST_DEATH_REASON = "x-first-death-reason"
    DEATH = "x-death"


class Status(enum.StrEnum):
    """Values of `x-status` on a response.

    `OK` and `WORKER_ERROR` come from a worker; the others are why a request died before a
    worker could answer it (RabbitMQ's dead-letter reasons, plus reasons of osrdyne's own).
    """

    OK = "ok"
    WORKER_ERROR = "worker_error"
    EXPIRED = "expired"
    REJECTED = "rejected"
    MAXLEN = "maxlen"
    DELIVERY_LIMIT = "delivery_limit"
    INVALID_KEY = "invalid_key"


class Event(enum.StrEnum):
    """Values of `x-event` on an activity report."""

    STARTED = "started"
    READY = "ready"
    REQUEST_RECEIVED = "request-received"


class WorkerEnv(enum.StrEnum):
    """Environment variables every driver sets for a worker (OSRD core workers read these)."""

    ID = "WORKER_ID"
    KEY = "WORKER_KEY"
    POOL = "WORKER_POOL"
    REQUESTS_QUEUE = "WORKER_REQUESTS_QUEUE"
    ACTIVITY_EXCHANGE = "WORKER_ACTIVITY_EXCHANGE"
    AMQP_URI = "WORKER_AMQP_URI"


@dataclasses.dataclass(frozen=True)
class PoolNames:
    """The broker objects of one pool, named exactly as the protocol fixes them."""

    pool: str

    @property
    def request_exchange(self) -> str:
        return f"{self.pool}-req-xchg"

    @property
    def orphan_exchange(self) -> str:
        return f"{self.pool}-orphan-xchg"

    @property
    def orphan_queue(self) -> str:
        return f"{self.pool}-orphan"

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.pool}-dl-xchg"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.pool}-dl"

    @property
    def activity_exchange(self) -> str:
        return f"{self.pool}-activity-xchg"

    @property
    def activity_queue(self) -> str:
        return f"{self.pool}-activity"

    @property
    def poison_queue(self) -> str:
        return f"{self.pool}-poison"

    @property
    def leader_queue(self) -> str:
        """Exclusive queue whose owner is the pool's acting controller (osrdyne's own)."""
        return f"{self.pool}-leader"

    @property
    def request_queue_prefix(self) -> str:
        return f"{self.pool}-req-"

    def request_queue(self, key: str) -> str:
        """The request queue of a worker group: the raw key, never encoded."""
        return f"{self.request_queue_prefix}{key}"

    def key_of_queue(self, queue: str) -> str | None:
        """The worker key of a request queue name, or None if it is not one of this pool's."""
        prefix = self.request_queue_prefix
        return queue[len(prefix) :] if queue.startswith(prefix) else None


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


#: The headers that carry W3C trace context from a request to its worker and answers.
TRACE_HEADERS = ("traceparent", "tracestate")


def trace_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The trace-context headers of `headers`, as text (to continue or copy a trace)."""
    found: dict[str, str] = {}
    for name in TRACE_HEADERS:
        value = (headers or {}).get(name)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if isinstance(value, str):
            found[name] = value
    return found


def key_problem(names: PoolNames, key: str) -> str | None:
    """Why `key` cannot have a request queue, or None when it can."""
    if not key:
        return "the worker key is empty"
    try:
        key.encode()
    except UnicodeEncodeError:
        return "the worker key is not valid UTF-8"
    if _CONTROL_CHARACTERS.search(key):
        return "the worker key contains control characters"
    if len(key.encode()) > MAX_KEY_BYTES:
        return f"the worker key is longer than {MAX_KEY_BYTES} bytes"
    if len(names.request_queue(key).encode()) > MAX_QUEUE_NAME_BYTES:
        return (
            f"the request queue name {names.request_queue_prefix!r} + key is longer than "
            f"{MAX_QUEUE_NAME_BYTES} bytes"
        )
    return None


def worker_environment(
    *, names: PoolNames, key: str, worker_id: str, amqp_uri: str
) -> dict[str, str]:
    """The environment a driver gives every worker of a group."""
    return {
        WorkerEnv.ID: worker_id,
        WorkerEnv.KEY: key,
        WorkerEnv.POOL: names.pool,
        WorkerEnv.REQUESTS_QUEUE: names.request_queue(key),
        WorkerEnv.ACTIVITY_EXCHANGE: names.activity_exchange,
        WorkerEnv.AMQP_URI: amqp_uri,
    }


def _allow_utf8_queue_names() -> None:
    """Let aio-pika use every queue name RabbitMQ accepts.

    Request queues are named after raw worker keys, which are any UTF-8. RabbitMQ accepts such
    names (up to 255 bytes), but pamqp, under aio-pika, checks queue names against the AMQP
    0-9-1 spec's ASCII-only pattern (gmr/pamqp#41, #47) and refuses them before they reach the
    broker. Relax that one check to "anything": lengths are still checked by `key_problem`
    here, and by the broker.
    """
    pamqp.constants.DOMAIN_REGEX["queue-name"] = re.compile(r".*", re.DOTALL)


def _decode_short_str_leniently(value: bytes) -> tuple[int, str]:
    """pamqp's short-string decoder, but bytes that are not UTF-8 are kept as surrogate escapes
    instead of raising in the middle of a frame (which would drop the whole connection, and
    the message would be redelivered to crash the next one: a poison pill)."""
    length = pamqp.common.Struct.byte.unpack(value[0:1])[0]
    return length + 1, value[1 : length + 1].decode("utf-8", errors="surrogateescape")


def _tolerate_invalid_utf8() -> None:
    """Let a routing key that is not UTF-8 (other clients can send one) reach the controller,
    which answers it `invalid_key` (see `key_problem`)."""
    pamqp.decode.short_str = _decode_short_str_leniently
    pamqp.decode.METHODS["shortstr"] = _decode_short_str_leniently


_allow_utf8_queue_names()
_tolerate_invalid_utf8()
