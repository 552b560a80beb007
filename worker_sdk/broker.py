"""What the worker's broker calls share: which failures mean the broker is gone, the bound on
one broker call while stopping, and closing a channel the broker may have closed already.

Kept apart so that the consumer (`consuming`), the standby wait (`standby`), the start-up
(`startup`) and the request path (`handling`) agree on what "the broker is gone" means.
"""

from __future__ import annotations

import contextlib

import aio_pika.abc
import aio_pika.exceptions

#: Longest wait for one broker call while shutting down.
STEP_TIMEOUT = 5.0

#: Failures of the broker or the connection: what is unacked then is redelivered.
ERRORS = (
    aio_pika.exceptions.AMQPError,
    # A channel closed under a reply (its connection being restored): a RuntimeError in
    # aiormq, not an AMQPError. The request is given back to its queue
    # (`handling.RequestHandler`) and delivered again; rejecting it would answer `rejected`
    # for a request the worker had handled (seen in the chaos run).
    aio_pika.exceptions.ChannelInvalidStateError,
    ConnectionError,
    TimeoutError,
)

#: What a broker call raises when the connection or channel under it is gone: AMQP errors,
#: socket errors, and `RuntimeError` from aio-pika/aiormq when a robust connection has no
#: open transport yet ("Connection was not opened", "<Connection ...> closed") or a channel
#: is closed (`ChannelInvalidStateError`). All are worth another attempt.
GONE = (aio_pika.exceptions.AMQPError, ConnectionError, RuntimeError)


async def close_quietly(channel: aio_pika.abc.AbstractChannel) -> None:
    """Close `channel`; a broker already gone has closed it."""
    with contextlib.suppress(*GONE):
        await channel.close()
