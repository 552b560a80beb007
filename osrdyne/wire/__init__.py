"""The wire protocol, in one place: what every other part of osrdyne depends on.

Names of a pool's broker objects (request-queue names in an encoding every AMQP client
accepts), header names and how to read their values, response statuses and activity events,
the one shape of error bodies, the worker environment, delivery of answers, dead-letter
headers, and opening connections (to any node of a cluster). The controller, the client, the
worker SDK and the drivers all take these from here, so they cannot drift apart. See
docs/protocol.md.
"""

from osrdyne.wire import _aiormq, _pamqp
from osrdyne.wire._connections import (
    DEFAULT_URL,
    Urls,
    connect,
    connect_robust,
    join_urls,
    move_on,
    split_urls,
)
from osrdyne.wire._deaths import Death
from osrdyne.wire._delivery import DIRECT_REPLY_TO, reply_delivery_mode
from osrdyne.wire._environment import (
    ASSIGNMENT_CONTENT_TYPE,
    Assignment,
    WorkerEnv,
    assignment,
    read_assignment,
    standby_environment,
    worker_environment,
)
from osrdyne.wire._errors import ERROR_FIELDS, error_body, error_document
from osrdyne.wire._headers import (
    MAX_RPC_PATH_BYTES,
    TRACE_HEADERS,
    Header,
    encodable,
    request_problem,
    trace_headers,
)
from osrdyne.wire._names import (
    KEY_ARGUMENT,
    MAX_KEY_BYTES,
    MAX_QUEUE_NAME_BYTES,
    PoolNames,
    key_problem,
)
from osrdyne.wire._pamqp import any_queue_name
from osrdyne.wire._properties import Properties
from osrdyne.wire._publish_retry import (
    CONFIRM_TIMEOUT,
    Unconfirmed,
    confirmed_within,
    deadline_from_header,
    is_transient,
    lost_not_cancelled,
)
from osrdyne.wire._publishing import RenewingChannel, is_refusal
from osrdyne.wire._request_ids import (
    MAX_REQUEST_ID,
    new_request_id,
    order,
    request_id,
    uuid7_time_ms,
)
from osrdyne.wire._statuses import Event, Status
from osrdyne.wire._text import MAX_REASON_CHARS, clean_reason, text

_pamqp.apply()
_aiormq.apply()

__all__ = [
    "ASSIGNMENT_CONTENT_TYPE",
    "Assignment",
    "CONFIRM_TIMEOUT",
    "DEFAULT_URL",
    "DIRECT_REPLY_TO",
    "Death",
    "ERROR_FIELDS",
    "Event",
    "Header",
    "KEY_ARGUMENT",
    "MAX_KEY_BYTES",
    "MAX_QUEUE_NAME_BYTES",
    "MAX_REASON_CHARS",
    "MAX_REQUEST_ID",
    "MAX_RPC_PATH_BYTES",
    "PoolNames",
    "Properties",
    "RenewingChannel",
    "Status",
    "TRACE_HEADERS",
    "Unconfirmed",
    "Urls",
    "WorkerEnv",
    "any_queue_name",
    "assignment",
    "clean_reason",
    "confirmed_within",
    "connect",
    "connect_robust",
    "deadline_from_header",
    "encodable",
    "error_body",
    "error_document",
    "is_refusal",
    "is_transient",
    "join_urls",
    "key_problem",
    "lost_not_cancelled",
    "move_on",
    "new_request_id",
    "order",
    "read_assignment",
    "reply_delivery_mode",
    "request_id",
    "request_problem",
    "split_urls",
    "standby_environment",
    "text",
    "trace_headers",
    "uuid7_time_ms",
    "worker_environment",
]
