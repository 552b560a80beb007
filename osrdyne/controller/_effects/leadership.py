"""Leadership: only one controller of a pool acts at a time.

The leader is the controller whose connection holds the pool's exclusive `P-leader` queue.
Standbys try to declare it every `retry` seconds and fail with RESOURCE_LOCKED while the leader
lives; when the leader's connection dies, the broker deletes the queue and the next standby's
attempt succeeds. Leadership ends with the connection that holds it, so a leader that lost its
connection cannot go on acting (no split brain through the broker).

**Fencing: a lease.** A leader whose link to its node goes silent (a cut, a one-way loss, a
node that stopped answering) does not see its connection close until aiormq gives up on it,
3 x (heartbeat + 1) seconds later; its node drops the connection, and so the lock, after two
heartbeat checks without a byte from it (2 to 3 heartbeats), and a standby elsewhere could
lead while the old leader still acts. So the leader holds a lease of 1.5 heartbeats
(`LEASE_HEARTBEATS`): every quarter of it, a round trip on the lock's channel (a passive
declare of `P-leader`); when no round trip sent within the lease has come back, it stops
acting (`Lease.keep` returns) before its node can have let the lock go. Half a heartbeat
more than one: a broker slowed down by a burst (50 new quorum queues at once on a loaded
2-core machine) once took 11 s to answer with a heartbeat of 10 s. And a controller that had
to wait for the lock (somebody held it) waits one lease before it acts: the lease of a leader
whose node was lost whole (the others let the lock go when they see the node down, a matter
of the Erlang tick, with no word from that leader) has run out by then, provided the
heartbeat is shorter than 0.4 x the nodes' `net_ticktime` (docs/operations.md). No heartbeat
(0): no lease.

A controller names its connection `osrdyne <pool> <instance>`, followed by ` api=<url>` when
its HTTP API is known, so a standby can say who leads: the broker's management API names the
connection that owns the `P-leader` queue (`find_leader`), and that connection's name says
the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aio_pika.abc
import aio_pika.exceptions
import aiormq.exceptions

from osrdyne import wire
from osrdyne.controller._decisions.status import Leader
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.exceptions import OsrdyneError
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)


async def acquire(
    connection: aio_pika.abc.AbstractConnection, names: PoolNames, *, retry: float = 1.0
) -> tuple[aio_pika.abc.AbstractChannel, bool]:
    """Wait until this connection leads the pool; the channel holding the lock, and whether
    another controller held it first (whose lease the caller must wait out)."""
    contended = False
    while True:
        channel = await connection.channel()
        try:
            await channel.declare_queue(names.leader_queue, exclusive=True, auto_delete=True)
        except aiormq.exceptions.ChannelLockedResource:
            if not contended:
                logger.info("another controller leads pool %r: standing by", names.pool)
                contended = True
            await asyncio.sleep(retry)
            continue
        logger.info("leading pool %r", names.pool)
        return channel, contended


#: The lease, in heartbeats: under the 2 after which the broker may drop a silent leader.
LEASE_HEARTBEATS = 1.5
#: Seconds the lease check yields before it gives up (a reply may be waiting to be read).
_SETTLE = 0.05

#: What a failed renewal raises: the channel or connection gone, or no answer in time.
_RENEWAL_ERRORS = (
    aio_pika.exceptions.AMQPError,
    ConnectionError,
    OSError,
    RuntimeError,
    TimeoutError,
)


class LeaseExpired(OsrdyneError, ConnectionError):
    """The leader heard nothing from its node for its lease: it stopped acting, and the
    session ends (the next one starts at the next address)."""


class Lease:
    """The leader's lease: `seconds` (the connection's heartbeat) from the last round trip
    to its node sent and answered. See the module's docstring."""

    def __init__(
        self, channel: aio_pika.abc.AbstractChannel, names: PoolNames, seconds: float
    ) -> None:
        self.channel, self.names, self.seconds = channel, names, seconds
        #: `time.monotonic()` when the last answered round trip was sent.
        self.renewed = time.monotonic()

    async def hold(
        self, leading: Coroutine[Any, Any, None], *, on_loss: Callable[[], None]
    ) -> None:
        """Run `leading` while the lease holds (its start-up included): when the lease runs
        out, `on_loss()` at once, `leading` is cancelled (its own clean-up runs), then
        `LeaseExpired`. Without a lease (`seconds` 0), `leading` alone."""
        if not self.seconds:
            await leading
            return
        task = asyncio.create_task(leading, name="leading")
        keeping = asyncio.create_task(self.keep(), name="leader's lease")
        try:
            await asyncio.wait({task, keeping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            keeping.cancel()
            if not task.done():
                on_loss()
                task.cancel()
            await asyncio.gather(task, keeping, return_exceptions=True)
        if not task.cancelled():
            task.result()  # its own failure, if any
        elif keeping.done() and not keeping.cancelled():
            raise LeaseExpired(
                f"no answer from the broker within the lease ({self.seconds:.0f} s): stepped down"
            )

    async def keep(self) -> None:
        """Renew every quarter of the lease (in the background: a renewal that hangs on a
        silent link is never cancelled half-way, which would leave its channel expecting the
        wrong answer); return when the lease has run out, within an eighth of it."""
        renewing = asyncio.create_task(self._renew(), name=f"lease of {self.names.pool}")
        try:
            while True:
                left = self.renewed + self.seconds - time.monotonic()
                if left <= 0:
                    # An answer that came while this process was starved of CPU may still
                    # wait in the socket: let the reader have it first.
                    await asyncio.sleep(_SETTLE)
                    left = self.renewed + self.seconds - time.monotonic()
                if left <= 0:
                    logger.warning(
                        "pool %r: no answer from the broker for %.1f s (the lease): stepping down",
                        self.names.pool,
                        time.monotonic() - self.renewed,
                    )
                    return
                await asyncio.sleep(min(left, self.seconds / 8))
        finally:
            renewing.cancel()

    async def _renew(self) -> None:
        period = self.seconds / 4
        while True:
            sent = time.monotonic()
            try:
                with wire.lost_not_cancelled(f"lease of pool {self.names.pool!r}"):
                    await self.channel.declare_queue(self.names.leader_queue, passive=True)
                self.renewed = max(self.renewed, sent)
            except _RENEWAL_ERRORS as exc:
                logger.debug("lease of pool %r not renewed: %r", self.names.pool, exc)
            await asyncio.sleep(max(0.0, sent + period - time.monotonic()))


def connection_name(pool: str, instance: str, api_url: str | None) -> str:
    """The name a controller's connection shows to the broker (and to `find_leader`)."""
    name = f"osrdyne {pool} {instance}"
    return f"{name} api={api_url}" if api_url else name


async def find_leader(api: ManagementApi, names: PoolNames) -> Leader | None:
    """Who leads the pool, as the broker says (None: nobody, or the broker has not said yet;
    it fills in a queue's owner a few seconds after the queue is declared)."""
    queue = await api.queue(names.leader_queue)
    owner: Any = (queue or {}).get("owner_pid_details")
    if not isinstance(owner, dict) or not isinstance(owner.get("name"), str):
        return None
    connection = await api.connection(owner["name"])
    properties = (connection or {}).get("client_properties") or {}
    name = properties.get("connection_name") if isinstance(properties, dict) else None
    prefix = f"osrdyne {names.pool} "
    if not isinstance(name, str) or not name.startswith(prefix):
        return None
    instance, _, api_url = name[len(prefix) :].partition(" api=")
    return Leader(instance=instance, api=api_url or None)
