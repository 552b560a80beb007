"""An orphan forwarded into a request queue created moments ago is acked only once the queue
is `queues.young_queue_hold` seconds old: until then it stays in the orphan queue, unacked,
and a controller stopped meanwhile leaves it there for the next one (delivered again, never
lost). RabbitMQ 3.10 can bring a quorum queue declared a few hundred ms before its node was
SIGKILLed back as a new, empty member, though it had confirmed the forward
(docs/reliability.md, rabbitmq-server#15725): the orphan's ack is what keeps the request.

Real broker, real controller (the in-memory driver: no worker takes the forwarded request,
which stays in the key's queue to be counted). The broker crash itself is
`tests/faults/test_broker_restart.py` (a race: lost in 2 of 8 runs without the hold); here
the hold is checked deterministically, by stopping the controller inside it.
"""

from __future__ import annotations

from pathlib import Path

import aio_pika
import pytest

from drivers.memory import MemoryDriver
from osrdyne.wire import PoolNames
from tests import broker
from tests.conftest import raw_connection, running_controller
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("hold", [600.0, 0.0], ids=["held", "no-hold"])
async def test_an_orphan_forwarded_into_a_new_queue_is_acked_once_the_queue_is_older(
    pool: str, tmp_path: Path, hold: float
) -> None:
    key, names = "fresh", PoolNames(pool)
    async with running_controller(
        pool,
        tmp_path,
        MemoryDriver(),
        amqp={"stop_grace": 2},
        queues={"young_queue_hold": hold},
        groups={"unbind_delay": 300, "stop_delay": 300},
    ) as controller:
        async with raw_connection(broker.AMQP_URL) as connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.get_exchange(names.request_exchange)
            await exchange.publish(aio_pika.Message(b"one"), routing_key=key, mandatory=True)
        forwarded = controller.metrics.orphans.labels("forwarded")
        await eventually(lambda: forwarded._value.get() >= 1, what="the orphan forwarded")
        ready = await broker.ready_messages(names.request_queue(key), names.orphan_queue)
        assert ready == {names.request_queue(key): 1, names.orphan_queue: 0}  # orphan delivered
    # Stopped: the held orphan was never acked, and is back in the orphan queue for the next
    # controller (which forwards it again: a duplicate at worst); without the hold it is gone.
    ready = await broker.ready_messages(names.request_queue(key), names.orphan_queue)
    assert ready == {names.request_queue(key): 1, names.orphan_queue: 1 if hold else 0}
