"""How answers travel: direct reply-to, and the delivery mode an answer is published with."""

from __future__ import annotations

import aio_pika

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


def reply_delivery_mode(reply_to: str) -> aio_pika.DeliveryMode:
    """AMQP delivery mode of an answer to `reply_to`: persistent (2) to a named queue, so the
    answer outlives a broker restart with its queue; transient (1) to a direct reply-to
    address, which has no queue to keep it in."""
    if reply_to.startswith(DIRECT_REPLY_TO):
        return aio_pika.DeliveryMode.NOT_PERSISTENT
    return aio_pika.DeliveryMode.PERSISTENT
