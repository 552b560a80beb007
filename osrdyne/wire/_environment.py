"""The environment every driver gives a worker: who it is and where its requests are.

A keyed worker gets its key and request queue at start. A standby worker (started ahead of
demand) gets a standby queue instead and learns its key from the one assignment message the
controller publishes there (`assignment`, `read_assignment`; docs/protocol.md).
"""

from __future__ import annotations

import enum
import json
from typing import NamedTuple

from osrdyne.wire import _names

#: The content type of an assignment message.
ASSIGNMENT_CONTENT_TYPE = "application/json"
#: The longest assignment body a worker reads (a key and a queue name fit in far less).
MAX_ASSIGNMENT_BYTES = 4096


class WorkerEnv(enum.StrEnum):
    """Environment variables every driver sets for a worker (OSRD core workers read these)."""

    ID = "WORKER_ID"
    KEY = "WORKER_KEY"
    POOL = "WORKER_POOL"
    REQUESTS_QUEUE = "WORKER_REQUESTS_QUEUE"
    ACTIVITY_EXCHANGE = "WORKER_ACTIVITY_EXCHANGE"
    AMQP_URI = "WORKER_AMQP_URI"
    #: Set instead of KEY and REQUESTS_QUEUE for a standby worker.
    STANDBY_QUEUE = "WORKER_STANDBY_QUEUE"


def worker_environment(
    *, names: _names.PoolNames, key: str, worker_id: str, amqp_uri: str
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


def standby_environment(
    *, names: _names.PoolNames, worker_id: str, amqp_uri: str
) -> dict[str, str]:
    """The environment of a standby worker: no key yet, a standby queue to wait on."""
    return {
        WorkerEnv.ID: worker_id,
        WorkerEnv.POOL: names.pool,
        WorkerEnv.STANDBY_QUEUE: names.standby_queue(worker_id),
        WorkerEnv.ACTIVITY_EXCHANGE: names.activity_exchange,
        WorkerEnv.AMQP_URI: amqp_uri,
    }


class Assignment(NamedTuple):
    """What a standby worker is told: serve `key` from `requests_queue`."""

    key: str
    requests_queue: str


def assignment(names: _names.PoolNames, key: str) -> bytes:
    """The body of the assignment message giving `key` to a standby worker of the pool."""
    document = {"pool": names.pool, "key": key, "requests_queue": names.request_queue(key)}
    return json.dumps(document, ensure_ascii=False).encode()


def read_assignment(body: bytes, *, pool: str) -> Assignment | str:
    """The assignment in `body`, or what is wrong with it (a worker refuses it, unread)."""
    if len(body) > MAX_ASSIGNMENT_BYTES:
        return f"an assignment over {MAX_ASSIGNMENT_BYTES} bytes"
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(document, dict):
        return "not a JSON object"
    if document.get("pool") != pool:
        return f"for another pool ({document.get('pool')!r}, not {pool!r})"
    names = _names.PoolNames(pool)
    key, queue = document.get("key"), document.get("requests_queue")
    if not isinstance(key, str) or _names.key_problem(names, key) is not None:
        return f"an invalid key {key!r}"
    try:
        expected = names.request_queue(key)
    except ValueError as exc:
        return str(exc)
    if queue != expected:
        return f"request queue {queue!r} is not the key's"
    return Assignment(key, expected)
