"""The values the protocol puts in headers: response statuses and activity events."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """Values of `x-status` on a response.

    `OK` and `WORKER_ERROR` come from a worker; `PROGRESS` marks an interim message (never the
    answer); the others are why a request died before a worker could answer it (RabbitMQ's
    dead-letter reasons, plus reasons of osrdyne's own).
    """

    OK = "ok"
    WORKER_ERROR = "worker_error"
    #: An interim message (with `x-non-terminating-response: true`): the answer follows.
    PROGRESS = "progress"
    EXPIRED = "expired"
    REJECTED = "rejected"
    MAXLEN = "maxlen"
    DELIVERY_LIMIT = "delivery_limit"
    #: The key can never have a request queue.
    INVALID_KEY = "invalid_key"
    #: The message cannot be handled as it was sent (e.g. a header that is not text).
    INVALID_REQUEST = "invalid_request"
    #: A new key refused by the group cap or the broker's limits.
    OVERLOADED = "overloaded"
    #: The key's workers keep failing to start (its group is failing): the error body says
    #: why (the last reason a worker reported, or its exit status). The controller keeps
    #: restarting them; a later request may be served.
    START_FAILED = "start_failed"


class Event(enum.StrEnum):
    """Values of `x-event` on an activity report."""

    STARTED = "started"
    #: Still loading what its key names (between `started` and `ready`), once per interval:
    #: a long load keeps its group alive.
    LOADING = "loading"
    READY = "ready"
    REQUEST_RECEIVED = "request-received"
    #: The worker's start-up failed (its hooks, its dataset's load) and it is about to exit;
    #: header `x-reason` says why, short and redacted (`start_failure_reason`).
    START_FAILED = "start-failed"
