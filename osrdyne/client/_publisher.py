"""Publishing a call's request: confirmed, within its deadline, again while refused.

The fast path (the channel open and ready, the pool's exchange known) is one publish on the
aiormq channel, bounded by aiormq's own timeout, without a timer, a retry loop or a task of
ours. Anything else, and a first publish refused, takes the retry loop: a refusal that passes
(a negative confirm, the channel closed by the broker, no confirm in time) is published again,
the same message, on a fresh channel (`wire.RenewingChannel`) after a growing pause, until the
call's deadline. A request for a pool without an exchange, or whose orphan queue is gone, ends
at once (`PoolNotFound`); a body over the broker's limit, as `RequestTooLarge`.
"""

from __future__ import annotations

import asyncio

import aio_pika.abc
import aio_pika.exceptions
import aiormq
import aiormq.abc
import aiormq.exceptions

from osrdyne import exceptions, wire
from osrdyne.client._call import Call, Request
from osrdyne.wire import PoolNames

#: What a publish meets when its connection is down (or going).
_CONNECTION_ERRORS = (
    aio_pika.exceptions.ChannelInvalidStateError,
    aio_pika.exceptions.AMQPConnectionError,
    ConnectionError,
)


class Publisher:
    """Publishes the client's requests on the channel of its connection (`attach`)."""

    def __init__(self) -> None:
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        #: The channel requests are published on (and direct replies consumed on).
        self._channel: wire.RenewingChannel | None = None
        #: Request exchanges known to exist.
        self._exchanges: set[str] = set()
        #: The request exchange of each pool whose exchange is known to exist.
        self._exchange_names: dict[str, str] = {}

    def attach(
        self, connection: aio_pika.abc.AbstractRobustConnection, channel: wire.RenewingChannel
    ) -> None:
        """Publish on `channel` of `connection` from now on."""
        self._connection, self._channel = connection, channel

    def detach(self) -> None:
        self._connection = self._channel = None

    def forget_exchanges(self, *_: object) -> None:
        """After a reconnection: the exchanges are checked again before their first use."""
        self._exchanges.clear()
        self._exchange_names.clear()

    async def send_in_time(self, call: Call, request: Request) -> None:
        """Publish the request of `call` (confirmed when `confirm`) within its deadline: a
        publish waiting for a connection, a channel or a confirm (a node lost under it) ends
        the call with `RequestTimeout` at its deadline, like a call whose answer never comes.

        The fast path (the channel open and ready, the pool's exchange known): one publish,
        bounded by aiormq's own timeout (the confirm's bound or the deadline, whichever is
        first), without a timer, a retry loop or a task of ours. Anything else, and a first
        publish refused, takes `_publish` in a timeout of the call's deadline."""
        after: BaseException | None = None
        if call.channel is None and self._channel is not None:
            exchange = self._exchange_names.get(call.pool)
            held = self._channel.try_acquire() if exchange is not None else None
            if held is not None:
                assert exchange is not None
                call.channel, underlay = held
                try:
                    await self._publish_on(underlay, call, exchange, request, fast=True)
                    return
                except exceptions.RequestRefused as exc:
                    if isinstance(exc.__cause__, wire.Unconfirmed) and call.time_left <= 0:
                        raise _deadline_error(call) from None  # no confirm by then
                    call.refused = exc
                    await self._channel.renew(call.channel)
                    if not wire.is_transient(exc) or call.time_left <= 0:
                        raise
                    after = exc
                except exceptions.ConnectionLost as exc:
                    if not wire.is_transient(exc):
                        raise
                    after = exc
        try:
            async with asyncio.timeout(max(0.0, call.time_left)):
                await self._publish(call, request, after=after)
        except TimeoutError:
            raise _deadline_error(call) from None

    async def _publish(
        self, call: Call, request: Request, *, after: BaseException | None = None
    ) -> None:
        """Publish on the current channel, held by `call` until it ends. A refusal that
        passes (a negative confirm, the channel closed by the broker) is published again,
        the same message, on a fresh channel after a growing pause, until the call's deadline
        (`wire.RenewingChannel.retrying`); then the last refusal is raised. `after`: the
        refusal of a first publish (the fast path's): the loop starts with its pause."""
        assert self._connection is not None and self._channel is not None
        if not self._connection.connected.is_set():
            # Reconnecting (its node was lost): the call waits for it, within its deadline.
            try:
                async with asyncio.timeout(max(0.0, call.time_left)):
                    await self._connection.connected.wait()
            except TimeoutError:
                raise exceptions.RequestTimeout(
                    f"request to pool {call.pool!r} key {call.key!r} not published within "
                    f"{call.timeout}s: the connection to the broker was down until the call's "
                    "deadline (reconnecting)"
                ) from None
        async for attempt in self._channel.retrying(call.deadline, after=after):
            with attempt:
                if call.answered:
                    return  # a refused try was taken after all, and answered
                if call.channel is not None:
                    # The last try's channel: refused, or closed by the broker (which failed
                    # the call: it is sent again, so it waits again).
                    self._channel.release(call.channel)
                    call.channel = None
                    call.error = None
                call.channel = await self._channel.acquire()
                try:
                    with wire.lost_not_cancelled(f"request to pool {call.pool!r}"):
                        exchange = await self._exchange(call.pool)
                        underlay = await call.channel.get_underlay_channel()
                except _CONNECTION_ERRORS as exc:
                    raise exceptions.ConnectionLost(
                        f"cannot publish to pool {call.pool!r} while the connection is down: {exc}"
                    ) from exc
                try:
                    await self._publish_on(underlay, call, exchange, request)
                except exceptions.RequestRefused as exc:
                    call.refused = exc
                    await self._channel.renew(call.channel)
                    raise

    async def _publish_on(
        self,
        channel: aiormq.abc.AbstractChannel,
        call: Call,
        exchange: str,
        request: Request,
        *,
        fast: bool = False,
    ) -> None:
        """One publish of `request`, answered (confirmed or refused) within the confirm's
        bound (`wire.CONFIRM_TIMEOUT`; `fast`: or the call's deadline if sooner), else
        refused as `wire.Unconfirmed`."""
        pool, key = call.pool, call.key
        bound = wire.CONFIRM_TIMEOUT
        if fast:
            bound = min(bound, max(0.0, call.time_left))
        try:
            result = await channel.basic_publish(
                request.data,
                exchange=exchange,
                routing_key=key,
                properties=request.properties,
                mandatory=True,
                timeout=bound,
            )
        except asyncio.CancelledError as exc:
            # aiormq ends the futures of a connection found stuck with CancelledError; a
            # real cancellation of this task goes through (`wire.lost_not_cancelled`).
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            raise exceptions.ConnectionLost(
                f"request to pool {pool!r}: the connection was lost under it (found stuck)"
            ) from exc
        except TimeoutError:
            # No answer in time, from a channel that may have lost track of the queue: a
            # refusal, published again on a fresh channel (`wire.Unconfirmed`).
            unconfirmed = wire.Unconfirmed(
                f"pool {pool!r}: the broker neither confirmed nor refused a publish within "
                f"{bound:.3g} s"
            )
            raise exceptions.RequestRefused(
                f"the broker did not take the request for pool {pool!r} key {key!r}: {unconfirmed}"
            ) from unconfirmed
        except _CONNECTION_ERRORS as exc:
            raise exceptions.ConnectionLost(
                f"cannot publish to pool {pool!r} while the connection is down: {exc}"
            ) from exc
        except aiormq.exceptions.DeliveryError as exc:
            # A negative confirm: e.g. the key's quorum queue has no leader for a moment
            # after a cluster node was lost. Published again on a fresh channel.
            raise exceptions.RequestRefused(
                f"the broker did not take the request for pool {pool!r} key {key!r}: {exc}"
            ) from exc
        except aio_pika.exceptions.ChannelPreconditionFailed as exc:
            # A broker whose max_message_size is below `max_body` refuses the message (and
            # closes the channel): say so in our terms.
            if "max size" not in str(exc):
                raise
            raise exceptions.RequestTooLarge(
                f"the broker refused a body of {len(request.data)} bytes (set max_body to "
                f"the broker's max_message_size): {exc}"
            ) from exc
        except aiormq.exceptions.ChannelClosed as exc:
            if not wire.is_transient(exc):
                raise
            # Closed by the broker for a reason that is not the message's (a queue leader
            # lost under the publish): tried again while the deadline allows.
            raise exceptions.ConnectionLost(
                f"the broker closed the channel of a request for pool {pool!r}: {exc}"
            ) from exc
        if isinstance(result, aiormq.abc.DeliveredMessage):
            # Returned unroutable: the request exchange routes everything unbound to the
            # orphan queue, so that queue is gone. Waiting would only end in a timeout.
            raise exceptions.PoolNotFound(
                f"pool {pool!r} could not route the request for key {key!r}: its orphan "
                "queue is missing (is an osrdyne controller running for it?)"
            )

    async def _exchange(self, pool: str) -> str:
        """The pool's request exchange, checked once on a spare channel: publishing to a
        missing exchange would close the channel every pending call waits on."""
        known = self._exchange_names.get(pool)
        if known is not None:
            return known
        name = PoolNames(pool).request_exchange
        if name not in self._exchanges:
            assert self._connection is not None
            try:
                async with self._connection.channel() as spare:
                    await spare.declare_exchange(name, passive=True)
            except aio_pika.exceptions.ChannelNotFoundEntity as exc:
                raise exceptions.PoolNotFound(
                    f"pool {pool!r} has no exchange {name!r}: is an osrdyne controller "
                    "running for it?"
                ) from exc
            self._exchanges.add(name)
        self._exchange_names[pool] = name
        return name


def _deadline_error(call: Call) -> exceptions.RequestTimeout | exceptions.RequestRefused:
    """What a call ends with when its deadline comes before its request is published."""
    if call.refused is not None:
        # Refused until its deadline, which came while it was published again (a pause,
        # or a try still waiting for its confirm): the refusal is the answer.
        error = exceptions.RequestRefused(
            f"{call.refused} (published again until the call's deadline, {call.timeout}s)"
        )
        error.__cause__ = call.refused
        return error
    return exceptions.RequestTimeout(
        f"request to pool {call.pool!r} key {call.key!r} not published within {call.timeout}s"
    )
