"""The worker SDK in-process against real queues (no controller): handlers, endpoints,
requeue, draining on stop, and rate-limited activity reports."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aio_pika
import pytest

from osrdyne import Client, Response
from osrdyne.wire import ERROR_FIELDS, PoolNames
from tests import broker
from tests.conftest import raw_connection
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually
from worker_sdk import HandlerError, Reply, Request, Requeue, Worker, WorkerSettings


@dataclass
class Harness:
    worker: Worker
    names: PoolNames
    key: str
    channel: aio_pika.abc.AbstractChannel
    activity: list[str]
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def call(
        self,
        body: bytes = b"",
        *,
        path: str | None = None,
        headers: dict[str, Any] | None = None,
        timeout: float = 20,
    ) -> Response:
        """Publish straight to the group's queue (no controller here) and await the answer."""
        replies = await self.channel.declare_queue(exclusive=True, auto_delete=True)
        all_headers = dict(headers or {})
        if path:
            all_headers["x-rpc-path"] = path
        correlation_id = uuid.uuid4().hex
        await self.channel.default_exchange.publish(
            aio_pika.Message(
                body, headers=all_headers, reply_to=replies.name, correlation_id=correlation_id
            ),
            routing_key=self.names.request_queue(self.key),
        )
        message = await _get(replies, timeout)
        await replies.delete(if_unused=False, if_empty=False)
        return Response.from_message(message.body, message.headers, message.correlation_id)


async def _get(
    queue: aio_pika.abc.AbstractQueue, timeout: float
) -> aio_pika.abc.AbstractIncomingMessage:
    async def poll() -> aio_pika.abc.AbstractIncomingMessage | None:
        return await queue.get(no_ack=True, fail=False)

    return await eventually(poll, timeout=timeout, interval=0.02, what="a reply")


@pytest.fixture
async def harness(pool: str, amqp_url: str) -> AsyncIterator[Callable[..., Any]]:
    """Start an in-process worker on a queue of its own; stopped and checked after the test."""
    started: list[Harness] = []
    connection = await aio_pika.connect(amqp_url)

    async def start(worker_factory: Callable[[WorkerSettings], Worker], **settings: Any) -> Harness:
        names, key = PoolNames(pool), "k"
        channel = await connection.channel()
        activity_x = await channel.declare_exchange(
            names.activity_exchange, aio_pika.ExchangeType.FANOUT, auto_delete=True
        )
        activity_q = await channel.declare_queue(exclusive=True)
        await activity_q.bind(activity_x)
        await channel.declare_queue(names.request_queue(key), auto_delete=False)
        events: list[str] = []

        async def on_activity(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            events.append((message.headers or {})["x-event"])  # type: ignore[arg-type]

        await activity_q.consume(on_activity, no_ack=True)
        worker = worker_factory(
            broker.worker_settings(pool, key, id="w1", amqp_uri=amqp_url, **settings)
        )
        stop = asyncio.Event()
        task = asyncio.create_task(worker.serve(stop), name="worker under test")
        h = Harness(worker, names, key, channel, events, stop, task)
        started.append(h)
        await eventually(lambda: "ready" in events, what="worker ready")
        return h

    yield start
    for h in started:
        h.stop.set()
        await asyncio.wait_for(h.task, 30)
    await connection.close()
    await broker.delete_pool_objects(pool)


def echo_worker(settings: WorkerSettings) -> Worker:
    worker = Worker(settings)

    @worker.handler()
    async def echo(request: Request) -> bytes:
        return request.body

    @worker.handler("thread")
    def thread_name(request: Request) -> str:
        return threading.current_thread().name

    @worker.handler("json")
    def as_json(request: Request) -> dict[str, Any]:
        return {"got": request.json()}

    @worker.handler("refuse")
    async def refuse(request: Request) -> None:
        raise HandlerError("not today", details={"why": "testing"})

    @worker.handler("reply")
    def reply(request: Request) -> Reply:
        return Reply({"got": request.json()}, headers={"x-mine": "yes", "x-status": "forged"})

    @worker.handler("encoded")
    def encoded(request: Request) -> Reply:
        return Reply(b'{"n": 1}', headers={"x-count": 3}, content_type="application/json")

    return worker


async def test_handlers_by_path_sync_ones_off_the_event_loop(harness: Any) -> None:
    h = await harness(echo_worker)
    assert (await h.call(b"abc")).body == b"abc"
    thread = await h.call(path="thread")
    assert thread.ok and thread.text.startswith("handler")
    assert (await h.call(b'{"a": 1}', path="json")).json() == {"got": {"a": 1}}


async def test_a_handler_reply_carries_its_own_headers_but_not_over_the_protocols(
    harness: Any,
) -> None:
    h = await harness(echo_worker)
    answer = await h.call(b'{"a": 1}', path="reply")
    assert answer.ok and answer.json() == {"got": {"a": 1}}  # x-status stays the worker's
    assert answer.headers["x-mine"] == "yes"
    encoded = await h.call(path="encoded")
    assert encoded.ok and encoded.body == b'{"n": 1}' and encoded.headers["x-count"] == 3


async def test_failures_are_error_responses_with_details(harness: Any) -> None:
    h = await harness(echo_worker, error_status="core_error")
    refused = await h.call(path="refuse")
    assert refused.status == "core_error"
    doc = refused.json()
    assert list(doc) == list(ERROR_FIELDS)  # the one shape of every error body
    assert doc["status"] == "core_error" and doc["error"] == "not today"
    assert (doc["pool"], doc["key"], doc["path"], doc["worker_id"]) == (
        h.names.pool,
        "k",
        "refuse",
        "w1",
    )
    assert doc["details"] == {"why": "testing"}
    unknown = await h.call(path="nope")
    assert unknown.status == "core_error"
    assert unknown.json()["details"]["known_paths"] == [
        "encoded",
        "json",
        "refuse",
        "reply",
        "thread",
    ]
    bad_json = await h.call(b"{", path="json")
    assert bad_json.status == "core_error" and "JSONDecodeError" in bad_json.json()["error"]
    assert h.worker.stats["failed"] == 3


async def test_requeue_gives_the_request_back(harness: Any) -> None:
    attempts: list[bool] = []

    def factory(settings: WorkerSettings) -> Worker:
        worker = Worker(settings)

        @worker.handler()
        async def flaky(request: Request) -> str:
            attempts.append(request.redelivered)
            if len(attempts) == 1:
                raise Requeue("busy")
            return "second time lucky"

        return worker

    h = await harness(factory)
    assert (await h.call()).text == "second time lucky"
    assert attempts == [False, True]


async def test_stop_drains_in_flight_requests(harness: Any) -> None:
    release = asyncio.Event()

    def factory(settings: WorkerSettings) -> Worker:
        worker = Worker(settings)

        @worker.handler()
        async def slow(request: Request) -> str:
            await release.wait()
            return "finished"

        return worker

    h = await harness(factory)
    pending = asyncio.create_task(h.call(timeout=30))
    await eventually(
        lambda: (
            h.worker.stats.get("ok", 0) == 0
            and h.worker._in_flight is not None
            and len(h.worker._in_flight) == 1
        ),
        what="request in flight",
    )
    h.stop.set()
    await asyncio.sleep(0.2)
    release.set()
    assert (await pending).text == "finished"
    await asyncio.wait_for(h.task, 30)
    queue = await h.channel.declare_queue(h.names.request_queue(h.key), passive=True)
    assert queue.declaration_result.message_count == 0  # acked, not requeued


async def test_a_request_past_its_deadline_is_skipped_as_expired(harness: Any) -> None:
    h = await harness(echo_worker)
    response = await h.call(b"late", headers={"x-deadline": 1000})
    assert response.status == "expired"
    assert list(response.json()) == list(ERROR_FIELDS) and response.json()["status"] == "expired"
    assert h.worker.stats["expired"] == 1 and h.worker.stats["ok"] == 0


async def test_activity_reports_are_rate_limited(harness: Any) -> None:
    h = await harness(echo_worker, activity_interval=0.5, concurrency=8)
    answers = await asyncio.gather(*(h.call(b"x") for _ in range(40)))
    assert all(a.ok for a in answers)
    # The burst is folded into a report flushed at the next interval, not one per request.
    await eventually(lambda: "request-received" in h.activity, what="folded report")
    assert h.activity[:2] == ["started", "ready"]
    assert 1 <= h.activity.count("request-received") < 10


def slow_start_worker(settings: WorkerSettings) -> Worker:
    worker = echo_worker(settings)

    @worker.on_startup
    def load(_: Worker) -> None:  # a dataset or a model that takes a while (in a thread)
        time.sleep(2.2)

    return worker


async def test_a_long_startup_reports_loading_until_ready(harness: Any) -> None:
    h = await harness(slow_start_worker, activity_interval=0.5)
    events = list(h.activity)
    assert events[0] == "started" and "ready" in events
    loading = events[1 : events.index("ready")]
    # Once per interval while the hook ran: the controller sees the group used all along.
    assert loading and set(loading) == {"loading"}, events
    assert (await h.call(b"hi")).body == b"hi"


async def test_client_stream_yields_progress_then_the_answer(
    controller: Any, client: Client, pool: str
) -> None:
    kinds = [
        (r.interim, r.status) async for r in client.stream(pool, "s", path="progress", timeout=60)
    ]
    # An interim message never says `ok`: a client reading only `x-status` cannot take it for
    # the answer.
    assert kinds == [(True, "progress")] * 3 + [(False, "ok")]


async def test_worker_consumes_again_after_its_connection_is_dropped(harness: Any) -> None:
    """The broker force-closes the worker's connection; it reconnects and serves again."""
    from tests.client.test_reply_queues import close_connection, find_connection

    h = await harness(echo_worker)
    assert (await h.call(b"before")).ok
    await close_connection(await find_connection(f"worker w1 ({h.names.pool})"))
    assert (await h.call(b"after", timeout=60)).body == b"after"


async def test_a_consumer_lost_while_connected_is_made_again(harness: Any) -> None:
    """The broker stops delivering to the worker while its connection and channel live and
    aio-pika does not know (its consumer is cancelled on the channel under aio-pika's
    robust one, as when a restore failed halfway): requests wait in the queue. The worker
    sees that the broker holds no consumer of its and consumes again on a new channel."""
    h = await harness(echo_worker, consumer_lost_after=1.0)
    assert (await h.call(b"before")).ok
    assert h.worker._consumer is not None and h.worker._consumer.consuming is not None
    channel, queue, tag = h.worker._consumer.consuming
    underlay = await channel.get_underlay_channel()
    await underlay.basic_cancel(tag)
    assert tag not in underlay.consumers
    assert (await h.call(b"after", timeout=60)).body == b"after"
    assert h.worker.consumer_restarts == 1
    assert not h.task.done()


async def test_a_worker_whose_queue_is_gone_for_good_ends_itself(harness: Any) -> None:
    """Its queue deleted and never made again: the worker tries to consume again for
    `queue_wait_timeout`, then ends itself with the reason (its driver restarts it, and a
    worker that cannot find its queue at start says so as `start-failed`)."""
    h = await harness(echo_worker, consumer_lost_after=0.5, queue_wait_timeout=2.0)
    async with broker.management() as http:
        name = urllib.parse.quote(h.names.request_queue(h.key), safe="")
        assert (await http.delete(f"/queues/%2F/{name}")).status_code in (200, 204)
    await asyncio.wait_for(h.task, 60)
    assert h.worker.aborted is not None and "was lost and not made again" in h.worker.aborted


async def test_worker_survives_its_connection_cut_before_and_while_consuming(
    pool: str, amqp_url: str
) -> None:
    """The fresh-machine failure: RabbitMQ 3.10 drops the connection when a consumer attaches
    to a quorum queue whose member is not running yet, and the worker's next `channel()`
    raised `RuntimeError` (the robust connection had no open transport yet), which ended it.
    Here its connection is cut, and the broker unreachable for a while, as it waits for its
    queue; then cut again as it consumes. It must serve in the end, and still be running."""
    names, key = PoolNames(pool), "k"
    url = urllib.parse.urlsplit(amqp_url)
    proxy = await TcpProxy(url.hostname or "127.0.0.1", url.port or 5672).start()
    through_proxy = url._replace(netloc=f"{url.netloc.rsplit('@', 1)[0]}@127.0.0.1:{proxy.port}")
    settings = broker.worker_settings(pool, key, id="w-cut", amqp_uri=through_proxy.geturl())
    worker = echo_worker(settings)
    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        await channel.declare_exchange(
            names.activity_exchange, aio_pika.ExchangeType.FANOUT, auto_delete=True
        )
        stop = asyncio.Event()
        task = asyncio.create_task(worker.serve(stop), name="worker under test")
        try:
            await eventually(lambda: _started(worker), what="worker connected")
            # Unreachable for longer than the longest back-off between two attempts: at least
            # one attempt to find the queue meets a connection with no transport.
            proxy.refusing = True
            proxy.cut()
            await asyncio.sleep(3)
            assert not task.done(), task
            proxy.refusing = False
            await channel.declare_queue(
                names.request_queue(key), durable=True, arguments={"x-queue-type": "quorum"}
            )
            h = Harness(worker, names, key, channel, [], stop, task)
            assert (await h.call(b"first", timeout=60)).body == b"first"
            proxy.cut()
            assert (await h.call(b"again", timeout=60)).body == b"again"
            assert not task.done()
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
            await proxy.close()


def _started(worker: Worker) -> bool:
    """It has connected and published `started`: now it waits for its queue."""
    return worker._reporter is not None and worker._reporter.sent >= 1


@pytest.mark.parametrize("stage", ["startup hook", "waiting for its queue"])
async def test_a_stop_while_starting_ends_the_worker_without_taking_a_request(
    pool: str, amqp_url: str, stage: str
) -> None:
    """SIGTERM (here `stop`) while a dataset loads or while the queue is not there yet ends
    the worker at once: before, it finished its start first and the driver had to SIGKILL it
    after `stop_timeout` (a group stopped as it loads)."""
    names, key = PoolNames(pool), "k"
    loading = asyncio.Event()
    worker = echo_worker(broker.worker_settings(pool, key, id="w1", amqp_uri=amqp_url))

    @worker.on_startup
    async def load(_: Worker) -> None:
        loading.set()
        if stage == "startup hook":
            await asyncio.Event().wait()  # a load that has not ended when the stop comes

    async with raw_connection(amqp_url) as connection:
        channel = await connection.channel()
        await channel.declare_exchange(
            names.activity_exchange, aio_pika.ExchangeType.FANOUT, auto_delete=True
        )
        if stage == "startup hook":
            await channel.declare_queue(names.request_queue(key))
        stop = asyncio.Event()
        serving = asyncio.create_task(worker.serve(stop), name="worker under test")
        try:
            await asyncio.wait_for(loading.wait(), 30)
            stop.set()
            await asyncio.wait_for(serving, 30)  # a bound, not a measure
            assert worker.stats.get("ok", 0) == 0
            if stage == "startup hook":
                queue = await channel.declare_queue(names.request_queue(key), passive=True)
                assert queue.declaration_result.consumer_count == 0
        finally:
            serving.cancel()
            await broker.delete_pool_objects(pool)


async def test_a_reply_that_fails_on_a_live_request_channel_gives_the_request_back(
    harness: Any, amqp_url: str
) -> None:
    """The reply fails (its channel closed) while the request's own channel lives: as when a
    connection is restored with the request channel first and the reply channel not yet (a
    cluster test's key went unanswered for minutes: each such request held unacked, with a
    prefetch slot, for good). The worker gives the request back to its queue; delivered
    again, it is answered. The fault is real: the worker's reply channel is swapped, for the
    first reply only, for a channel the broker has closed."""
    calls: list[bool] = []
    spare = await aio_pika.connect(amqp_url)
    closed = await spare.channel(publisher_confirms=False)
    underlay = await closed.get_underlay_channel()
    # The broker closes a channel that publishes to an exchange it does not have.
    await underlay.basic_publish(b"", exchange=f"osrdyne-test-none-{uuid.uuid4().hex}")
    await eventually(lambda: underlay.is_closed, what="the broker closed the channel")

    def factory(settings: WorkerSettings) -> Worker:
        worker = echo_worker(settings)

        @worker.handler("once-unreplied")
        async def once_unreplied(request: Request) -> bytes:
            replier = worker._replier
            assert replier is not None
            calls.append(request.message.redelivered)
            if len(calls) == 1:
                working = replier._fast
                replier._fast = closed

                def restore() -> None:
                    replier._fast = working

                asyncio.get_running_loop().call_later(0.2, restore)
            return b"answered"

        return worker

    try:
        h = await harness(factory)
        # Direct reply-to, as osrdyne.Client calls: the reply goes on the worker's
        # unconfirmed channel (`Replier._fast`).
        answers: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        direct = await h.channel.get_queue("amq.rabbitmq.reply-to")

        async def on_answer(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            answers.put_nowait(message)

        await direct.consume(on_answer, no_ack=True)
        await h.channel.default_exchange.publish(
            aio_pika.Message(
                b"",
                headers={"x-rpc-path": "once-unreplied"},
                reply_to="amq.rabbitmq.reply-to",
                correlation_id=uuid.uuid4().hex,
            ),
            routing_key=h.names.request_queue(h.key),
        )
        answer = await asyncio.wait_for(answers.get(), 30)
        assert answer.body == b"answered"
        assert calls == [False, True]  # the first reply failed; delivered again, answered
        assert (await h.call(b"next")).body == b"next"  # and the worker serves on
    finally:
        await spare.close()


async def test_a_worker_whose_queue_is_missing_on_its_node_moves_to_the_next_address(
    pool: str, amqp_url: str
) -> None:
    """A node that answers but does not see the request queue the controller declared (its
    metadata partitioned from the others after a freeze; tests/cluster/test_node_loss.py
    makes that for real): after `queue_missing_move_after` seconds of NOT_FOUND the worker
    moves to its next address and serves there. Here the first address is a virtual host of
    the broker of the test's own, with the pool's activity exchange and no request queue
    (without the move, the worker waits there for `queue_wait_timeout`, 120 s)."""
    names, key = PoolNames(pool), "k"
    vhost = f"{pool}-stale"
    url = urllib.parse.urlsplit(amqp_url)
    user = urllib.parse.unquote(url.username or "guest")
    stale = url._replace(path="/" + urllib.parse.quote(vhost, safe="")).geturl()
    quoted = urllib.parse.quote(vhost, safe="")
    async with broker.management() as http:
        (await http.put(f"/vhosts/{quoted}")).raise_for_status()
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        (await http.put(f"/permissions/{quoted}/{user}", json=everything)).raise_for_status()
    try:
        async with raw_connection(stale) as connection:
            channel = await connection.channel()
            await channel.declare_exchange(names.activity_exchange, aio_pika.ExchangeType.FANOUT)
        settings = broker.worker_settings(
            pool, key, id="w-moves", amqp_uri=f"{stale},{amqp_url}", queue_missing_move_after=1.0
        )
        worker = echo_worker(settings)
        async with raw_connection(amqp_url) as connection:
            channel = await connection.channel()
            await channel.declare_exchange(
                names.activity_exchange, aio_pika.ExchangeType.FANOUT, auto_delete=True
            )
            await channel.declare_queue(names.request_queue(key), durable=True)
            stop = asyncio.Event()
            task = asyncio.create_task(worker.serve(stop), name="worker under test")
            try:
                h = Harness(worker, names, key, channel, [], stop, task)
                assert (await h.call(b"moved", timeout=60)).body == b"moved"
                assert not task.done()
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    finally:
        async with broker.management() as http:
            await http.delete(f"/vhosts/{quoted}")
