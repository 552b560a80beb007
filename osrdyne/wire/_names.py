"""The names of a pool's broker objects, and which worker keys can have a request queue.

Every name other implementations must agree on (exchanges and queues of a pool) is built here
and nowhere else, so the controller, the client, the worker SDK and the drivers cannot drift
apart. Request queues are named through `_queue_names` (the encoding every AMQP client
accepts); `request_queue` is the one function that computes such a name, `key_of_queue` the
one that reads it back. See docs/protocol.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from osrdyne.wire import _queue_names
from osrdyne.wire._text import has_control_characters, text

#: Longest routing key AMQP 0.9.1 can carry (a shortstr), in bytes.
MAX_KEY_BYTES = 255
#: Longest queue name RabbitMQ accepts, in bytes.
MAX_QUEUE_NAME_BYTES = 255
#: The request-queue argument carrying the queue's raw worker key.
KEY_ARGUMENT = _queue_names.KEY_ARGUMENT


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

    def standby_queue(self, worker_id: str) -> str:
        """Where a standby worker waits for its key (declared by the worker, exclusive)."""
        return f"{self.pool}-standby-{worker_id}"

    def request_queue(self, key: str) -> str:
        """The request queue of a worker group: the key in the readable encoding, or the
        hashed form when that would pass 255 bytes (docs/protocol.md). Check the key with
        `key_problem` first: this raises ValueError for a key that can have no queue."""
        found = _queue_names.name(self.request_queue_prefix, key, limit=MAX_QUEUE_NAME_BYTES)
        if found is None:
            raise ValueError(f"pool name {self.pool!r} is too long for request queue names")
        return found

    def request_queue_arguments(self, key: str) -> dict[str, Any]:
        """The queue arguments carrying `key` (every request queue is declared with them)."""
        return {KEY_ARGUMENT: key}

    def key_of_queue(self, queue: str, arguments: Mapping[str, Any] | None = None) -> str | None:
        """The worker key of one of this pool's request queues, None if it is not one.

        `arguments` are the queue's arguments (the management API lists them): the raw key
        they carry wins when it names this very queue. Otherwise the name is read: the
        readable form is decoded; a hashed form cannot be read without its argument (None);
        any other name is one osrdyne 0.1 gave, the raw key itself, adopted as such.
        """
        prefix = self.request_queue_prefix
        if not queue.startswith(prefix):
            return None
        given = arguments if isinstance(arguments, Mapping) else {}
        declared = text(given.get(KEY_ARGUMENT))
        if declared and key_problem(self, declared) is None:
            if self.request_queue(declared) == queue:
                return declared
        suffix = queue[len(prefix) :]
        decoded = _queue_names.decode(suffix)
        if decoded is not None:
            return decoded
        if not suffix or _queue_names.is_hashed(suffix):
            return None
        return suffix


def key_problem(names: PoolNames, key: str) -> str | None:
    """Why `key` cannot have a request queue, or None when it can."""
    if not key:
        return "the worker key is empty"
    try:
        key.encode()
    except UnicodeEncodeError:
        return "the worker key is not valid UTF-8"
    if has_control_characters(key):
        return "the worker key contains control characters"
    if len(key.encode()) > MAX_KEY_BYTES:
        return f"the worker key is longer than {MAX_KEY_BYTES} bytes"
    prefix = names.request_queue_prefix
    if _queue_names.name(prefix, key, limit=MAX_QUEUE_NAME_BYTES) is None:
        return f"the pool name {names.pool!r} is too long for request queue names"
    return None
