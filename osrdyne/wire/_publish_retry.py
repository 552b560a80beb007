"""Publishes the broker refused for a reason that passes, tried again until a deadline.

In the second after a cluster node is lost, RabbitMQ refuses publishes that it takes again a
moment later: a quorum queue whose leader was on the lost node answers with a negative confirm
(`basic.nack`) until a new leader is elected, and a channel can be closed under a publish.
AMQP 0-9-1 says a publisher that gets a `basic.nack` "probably needs to republish" (a nack
carries no reason: `x-max-length` with `reject-publish` and a queue without a leader look
alike), so every publisher of osrdyne (client requests, the controller's forwarded orphans,
answers and poison, the workers' replies and activity reports) republishes such a refusal with
a short, growing, jittered pause (tenacity), until the deadline of what it carries: the call's
deadline (`x-deadline`), or `DEFAULT_RETRY_FOR` seconds when it has none. The last refusal
then reaches the caller as it did before this retry existed.

A retry is the same message: same `message_id` (the request id) and `correlation_id`. A nack
does not say that the message was not enqueued (a quorum queue's leader may have written it
before it was lost): a request can reach a worker twice, and the client keeps the first
answer (docs/protocol.md, "At least once").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import aiormq.exceptions
import pamqp.commands
import tenacity

logger = logging.getLogger(__name__)

#: Pause before the first republish, seconds; it doubles (with jitter) up to `MAX_PAUSE`.
FIRST_PAUSE = 0.05
#: Longest pause between two publishes of one message, seconds.
MAX_PAUSE = 1.0
#: How long a publish whose message carries no deadline is retried, seconds.
DEFAULT_RETRY_FOR = 30.0
#: How long one publish waits for the broker's confirm before it is taken as refused, seconds.
CONFIRM_TIMEOUT = 10.0


class Unconfirmed(TimeoutError):
    """The broker neither confirmed nor refused a publish in time (a `TimeoutError`: what
    handles one as transient, the controller's consumers among them, requeues).

    A channel whose quorum-queue client lost track of the queue (its member was down when the
    channel published, or its leader moved under it) can hold a publish with no answer for as
    long as it lives, while a fresh channel is answered at once (RabbitMQ's
    `rabbit_fifo_client` resends only on some events; rabbitmq-server#14589 fixed one such
    case in 4.2). Such a publish is treated as a refusal: published again on a fresh channel.
    The first one may still be enqueued later: a request can then reach a worker twice, as
    after any refusal (docs/protocol.md, "At least once")."""


def is_refusal(exc: BaseException) -> bool:
    """A negative publisher confirm (the broker did not take the message)."""
    return isinstance(exc, aiormq.exceptions.DeliveryError) and isinstance(
        exc.frame, pamqp.commands.Basic.Nack
    )


def is_transient(exc: BaseException | None) -> bool:
    """The broker refused a publish for a reason that passes: a negative confirm, no confirm
    in time (`Unconfirmed`), or the channel closed by the broker with a code that is not the
    message's fault (not 403, 404, 405, 406: those are aiormq's subclasses of
    `ChannelClosed`). Follows `__cause__`, so an error of ours raised from such a refusal (the
    client's `RequestRefused`) counts too."""
    seen = 0
    while exc is not None and seen < 8:
        if (
            is_refusal(exc)
            or isinstance(exc, Unconfirmed)
            or type(exc) is aiormq.exceptions.ChannelClosed
        ):
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


@contextlib.contextmanager
def lost_not_cancelled(what: str) -> Iterator[None]:
    """A publish whose connection aiormq found stuck fails as a lost connection, not as a
    cancellation of the caller.

    aiormq ends the pending futures of a connection that received no frame for three
    heartbeats with `CancelledError` (its reader task's cancellation; aiormq#165), so a publish
    waiting for its confirm raises `CancelledError` while nobody cancelled the task that
    awaits it (seen: a client's link silenced by a packet filter, tests/cluster). Passed on,
    that reads as "cancelled" to the caller and ends its task. Here it becomes a
    `ConnectionError`; a real cancellation of the task (`Task.cancelling()`) goes through."""
    try:
        yield
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        raise ConnectionError(f"{what}: the connection was lost under it (found stuck)") from exc


@contextlib.asynccontextmanager
async def confirmed_within(seconds: float, what: str) -> AsyncIterator[None]:
    """The publish in the block answered (confirmed or refused) within `seconds`, else
    `Unconfirmed`."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError as exc:
        raise Unconfirmed(
            f"{what}: the broker neither confirmed nor refused a publish within {seconds} s"
        ) from exc


def deadline_from_header(value: Any) -> float | None:
    """An `x-deadline` header (epoch milliseconds) as a `time.monotonic()` instant, or None
    when it is missing or not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return time.monotonic() + (float(value) / 1000 - time.time())


@dataclasses.dataclass
class _Tries:
    attempt_number: int


def retrying(
    deadline: float | None,
    *,
    name: str,
    on_retry: Callable[[], None] | None = None,
    after: BaseException | None = None,
) -> tenacity.AsyncRetrying:
    """The retry loop of one publish: transient refusals (`is_transient`) retried with a
    jittered exponential pause until `deadline` (`time.monotonic()`; None: `DEFAULT_RETRY_FOR`
    from now), never sleeping past it; the last error re-raised. At least one attempt, even
    when the deadline has passed. `on_retry()` is called before each pause.

    `after`: the transient refusal of a first try made outside the loop (a publisher's fast
    path: tenacity's machinery costs more than the publish it guards): the loop's first try
    comes after that refusal's pause, and the pauses go on growing from there."""
    if deadline is None:
        deadline = time.monotonic() + DEFAULT_RETRY_FOR
    tried = 0 if after is None else 1

    growing = tenacity.wait_exponential_jitter(multiplier=FIRST_PAUSE, max=MAX_PAUSE)

    def pause_after(attempts: int) -> float:
        # The wait reads only the attempt number of the state it is given.
        tries = cast(tenacity.RetryCallState, _Tries(attempts))
        return max(0.0, min(growing(tries), deadline - time.monotonic()))

    def pause(state: tenacity.RetryCallState) -> float:
        return pause_after(state.attempt_number + tried)

    def past_deadline(state: tenacity.RetryCallState) -> bool:
        return time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline

    def announce(error: BaseException | None, upcoming: float, attempt: int) -> None:
        if on_retry is not None:
            on_retry()
        logger.info(
            "%s: the broker refused a publish (%r); publishing it again in %.2f s (try %d)",
            name,
            error,
            upcoming,
            attempt + 1,
        )

    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        announce(error, state.upcoming_sleep, state.attempt_number + tried)

    async def first_pause(state: tenacity.RetryCallState) -> None:
        if after is None or state.attempt_number != 1:
            return
        upcoming = pause_after(1)
        if time.monotonic() + upcoming >= deadline:
            raise after  # no time left for another try: the first refusal is the answer
        announce(after, upcoming, 1)
        await asyncio.sleep(upcoming)

    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(is_transient),
        stop=past_deadline,
        wait=pause,
        before=first_pause,
        before_sleep=before_sleep,
        reraise=True,
    )
