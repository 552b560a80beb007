"""Publishing that survives a channel the broker keeps refusing.

RabbitMQ keeps, in each channel process, one quorum-queue client per queue the channel
publishes to (`rabbit_fifo_client`: the queue's leader as the channel last knew it, and the
sequence of its pending enqueues). After a cluster node is lost and the queue's leader moves,
a channel that had published to that queue can go on answering every publish to it with a
negative confirm (`basic.nack`), for as long as it lives, while a fresh channel on the same
connection publishes the same message fine (seen on RabbitMQ 3.10 with a client that lived
through two node losses: a third to two thirds of its requests refused for minutes; see
docs/reliability.md). The queue did not refuse the message: the channel's stale view of it did.

A channel can also hold a publish to such a queue with no answer at all, for as long as it
lives (seen: an orphan forwarded after a broker SIGKILL, unconfirmed for over a minute, in a
controller whose channel had published to the queue before): a publish not answered within
`confirm_timeout` seconds (`Unconfirmed`) is treated as a refusal.

`RenewingChannel` is the one answer every publisher of osrdyne uses (client, controller,
worker SDK): a refused publish is tried again on a fresh channel, which from then on takes
every new publish; the refused channel is retired, and closed once the publishes (or, for the
client, the calls waiting for replies) still using it are done. Channels are renewed at most
once per `min_age` seconds, so a refusal streak does not churn channels. A refusal that a
fresh channel does not cure (a queue electing its leader, its `x-max-length` with
`reject-publish`, a majority of its members lost) is published again with a growing pause
until the deadline of what it carries (`_publish_retry`), and only then reaches the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aio_pika.abc
import aio_pika.exceptions
import aiormq.abc
import aiormq.exceptions
import tenacity

from osrdyne.wire import _publish_retry

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What a channel needs once it is opened, and again each time it is reopened (consume direct
#: replies, ...), before any publish.
OnOpen = Callable[[aio_pika.abc.AbstractChannel], Awaitable[None]]


#: A negative publisher confirm (the broker did not take the message).
is_refusal = _publish_retry.is_refusal


class RenewingChannel:
    """The publishing channel of one connection, replaced when the broker keeps refusing it.

    `hold()` lends the current channel for as long as a publish (or a call waiting for its
    reply on that channel) needs it; `publish()` runs one publish with the retry described in
    the module's docstring. Retired channels are closed when their last holder lets go.
    `on_open` runs on each channel when it opens and each time it is reopened, before the
    channel is lent again; `on_lost` hears of a channel that closed without being retired
    (the broker closed it, or its connection was lost)."""

    def __init__(
        self,
        connection: aio_pika.abc.AbstractConnection,
        *,
        name: str,
        publisher_confirms: bool = True,
        on_return_raises: bool = False,
        on_open: OnOpen | None = None,
        on_lost: Callable[[aio_pika.abc.AbstractChannel], None] | None = None,
        min_age: float = 1.0,
        ready_timeout: float = 30.0,
        confirm_timeout: float = _publish_retry.CONFIRM_TIMEOUT,
    ) -> None:
        self._connection = connection
        self._name = name
        self._confirms = publisher_confirms
        self._on_return_raises = on_return_raises
        self._on_open = on_open
        self._on_lost = on_lost
        self._min_age = min_age
        self._ready_timeout = ready_timeout
        self._confirm_timeout = confirm_timeout
        self._current: aio_pika.abc.AbstractChannel | None = None
        self._opened_at = 0.0
        self._holds: dict[aio_pika.abc.AbstractChannel, int] = {}
        self._retired: set[aio_pika.abc.AbstractChannel] = set()
        #: Set while a channel is open and `on_open` has run on it (cleared while it is
        #: closed and being reopened).
        self._prepared: weakref.WeakKeyDictionary[aio_pika.abc.AbstractChannel, asyncio.Event] = (
            weakref.WeakKeyDictionary()
        )
        #: The aiormq channel under each channel, as of its last (re)opening.
        self._underlays: weakref.WeakKeyDictionary[
            aio_pika.abc.AbstractChannel, aiormq.abc.AbstractChannel
        ] = weakref.WeakKeyDictionary()
        #: The current channel and its aiormq channel while it is open and prepared (the fast
        #: path of `try_acquire`); None otherwise.
        self._ready: tuple[aio_pika.abc.AbstractChannel, aiormq.abc.AbstractChannel] | None = None
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        #: Channels replaced after a refusal (tests and metrics read it).
        self.renewals = 0
        #: Publishes tried again after a transient refusal (tests and metrics read it).
        self.retries = 0

    @property
    def current(self) -> aio_pika.abc.AbstractChannel | None:
        """The channel new publishes go to (None before the first one)."""
        return self._current

    def is_retired(self, channel: aio_pika.abc.AbstractChannel) -> bool:
        """`channel` was replaced (its closing is ours, not a lost connection)."""
        return channel in self._retired

    async def channel(self) -> aio_pika.abc.AbstractChannel:
        """The current channel, opened on first use (and again if a plain channel was
        closed; a robust one is reopened by its connection, after a reconnection too), once
        it is ready: reopened, and `on_open` done again."""
        current = self._current
        if current is None or self._lost(current):
            async with self._lock:
                if self._current is None or self._lost(self._current):
                    self._set_current(await self._open())
                current = self._current
                assert current is not None
        prepared = self._prepared.get(current)
        if prepared is not None and not prepared.is_set():
            # Its connection is coming back, or the broker closed the channel: the robust
            # channel is reopened after the consumers' channels, whose redelivered requests
            # may already want to publish, and `on_open` (a direct reply-to consumer) must
            # be in place before a publish that needs it. Wait for both, bounded.
            try:
                async with asyncio.timeout(self._ready_timeout):
                    await prepared.wait()
            except TimeoutError:
                raise aio_pika.exceptions.ChannelInvalidStateError(
                    f"{self._name}: channel not restored within {self._ready_timeout} s"
                ) from None
        return current

    @staticmethod
    def _lost(channel: aio_pika.abc.AbstractChannel) -> bool:
        return channel.is_closed and not isinstance(channel, aio_pika.abc.AbstractRobustChannel)

    async def _open(self) -> aio_pika.abc.AbstractChannel:
        channel = await self._connection.channel(
            publisher_confirms=self._confirms, on_return_raises=self._on_return_raises
        )
        prepared = asyncio.Event()
        self._prepared[channel] = prepared

        def closed(*_: Any) -> None:
            prepared.clear()
            if self._ready is not None and self._ready[0] is channel:
                self._ready = None
            if self._on_lost is not None and channel not in self._retired:
                self._on_lost(channel)

        channel.close_callbacks.add(closed)
        if isinstance(channel, aio_pika.abc.AbstractRobustChannel):

            async def reopened(_: Any) -> None:
                if self._on_open is not None:
                    await self._on_open(channel)
                self._underlays[channel] = await channel.get_underlay_channel()
                if channel is self._current:
                    self._ready = (channel, self._underlays[channel])
                prepared.set()

            channel.reopen_callbacks.add(reopened)
        if self._on_open is not None:
            await self._on_open(channel)
        self._underlays[channel] = await channel.get_underlay_channel()
        prepared.set()
        self._opened_at = time.monotonic()
        return channel

    def _set_current(self, channel: aio_pika.abc.AbstractChannel) -> None:
        self._current = channel
        underlay = self._underlays.get(channel)
        self._ready = None if underlay is None else (channel, underlay)

    def try_acquire(
        self,
    ) -> tuple[aio_pika.abc.AbstractChannel, aiormq.abc.AbstractChannel] | None:
        """The current channel and its aiormq channel, held until `release`, when it is open
        and ready now; None when it must be waited for (`acquire`): a publisher's fast path,
        without an await."""
        ready = self._ready
        if ready is None or ready[1].is_closed:
            return None
        channel = ready[0]
        self._holds[channel] = self._holds.get(channel, 0) + 1
        return ready

    async def acquire(self) -> aio_pika.abc.AbstractChannel:
        """The current channel, held until `release`."""
        channel = await self.channel()
        self._holds[channel] = self._holds.get(channel, 0) + 1
        return channel

    def release(self, channel: aio_pika.abc.AbstractChannel) -> None:
        left = self._holds.get(channel, 0) - 1
        if left > 0:
            self._holds[channel] = left
            return
        self._holds.pop(channel, None)
        if channel in self._retired:
            self._close_later(channel)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
        channel = await self.acquire()
        try:
            yield channel
        finally:
            self.release(channel)

    async def renew(
        self, refused: aio_pika.abc.AbstractChannel
    ) -> aio_pika.abc.AbstractChannel | None:
        """A channel other than `refused` for new publishes; None when `refused` is itself
        fresh (younger than `min_age`: the refusal is not the channel's)."""
        async with self._lock:
            if self._current is not refused and self._current is not None:
                if not self._lost(self._current):
                    return self._current  # another publisher renewed it already
            elif time.monotonic() - self._opened_at < self._min_age:
                return None
            fresh = await self._open()
            self._set_current(fresh)
            self.renewals += 1
        self._retired.add(refused)
        logger.warning(
            "%s: the broker refused a publish on its channel; new publishes go to a fresh "
            "channel (renewal %d)",
            self._name,
            self.renewals,
        )
        if refused not in self._holds:
            self._close_later(refused)
        return fresh

    def retrying(
        self, deadline: float | None = None, *, after: BaseException | None = None
    ) -> tenacity.AsyncRetrying:
        """The retry loop of one publish (`_publish_retry.retrying`), counted in `retries`:
        for publishers that hold the channel themselves (the client's calls). `after`: the
        refusal of a first try made outside the loop."""
        return _publish_retry.retrying(
            deadline, name=self._name, on_retry=self._count_retry, after=after
        )

    def _count_retry(self) -> None:
        self.retries += 1

    async def publish(
        self,
        send: Callable[[aio_pika.abc.AbstractChannel], Awaitable[T]],
        *,
        deadline: float | None = None,
        retry: bool = True,
    ) -> T:
        """`send(channel)` on the current channel. When `retry`, a transient refusal
        (`_publish_retry.is_transient`: a negative confirm, or no answer within
        `confirm_timeout` seconds, `Unconfirmed`) renews the channel (unless it is younger than
        `min_age`) and is published again after a pause, until `deadline`
        (`time.monotonic()`; None: `_publish_retry.DEFAULT_RETRY_FOR` from now); then the
        last refusal is raised. `send` must publish the same message each time."""
        if not retry:
            async with self.hold() as channel:
                with _publish_retry.lost_not_cancelled(self._name):
                    return await send(channel)
        async for attempt in self.retrying(deadline):
            with attempt:
                async with self.hold() as channel:
                    try:
                        with _publish_retry.lost_not_cancelled(self._name):
                            async with _publish_retry.confirmed_within(
                                self._confirm_timeout, self._name
                            ):
                                return await send(channel)
                    except (aiormq.exceptions.DeliveryError, _publish_retry.Unconfirmed) as exc:
                        if is_refusal(exc) or isinstance(exc, _publish_retry.Unconfirmed):
                            await self.renew(channel)
                        raise
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def _close_later(self, channel: aio_pika.abc.AbstractChannel) -> None:
        if channel.is_closed:
            self._retired.discard(channel)
            return
        task = asyncio.create_task(self._close(channel), name=f"{self._name}: retire channel")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, channel: aio_pika.abc.AbstractChannel) -> None:
        try:
            await channel.close()
        except Exception:  # a channel of a lost connection: nothing left to close
            logger.debug("%s: closing a retired channel failed", self._name, exc_info=True)
        finally:
            self._retired.discard(channel)

    async def close(self) -> None:
        """Close every channel (the current one and the retired ones)."""
        channels = {c for c in (self._current, *self._retired, *self._holds) if c is not None}
        self._current = self._ready = None
        for channel in channels:
            self._retired.add(channel)
            with contextlib.suppress(Exception):
                if not channel.is_closed:
                    await channel.close()
        self._retired.clear()
        self._holds.clear()
        await asyncio.gather(*self._closing, return_exceptions=True)
