"""The environment every driver gives a worker: who it is and where its requests are."""

from __future__ import annotations

import enum

from osrdyne.wire import _names


class WorkerEnv(enum.StrEnum):
    """Environment variables every driver sets for a worker (OSRD core workers read these)."""

    ID = "WORKER_ID"
    KEY = "WORKER_KEY"
    POOL = "WORKER_POOL"
    REQUESTS_QUEUE = "WORKER_REQUESTS_QUEUE"
    ACTIVITY_EXCHANGE = "WORKER_ACTIVITY_EXCHANGE"
    AMQP_URI = "WORKER_AMQP_URI"


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
