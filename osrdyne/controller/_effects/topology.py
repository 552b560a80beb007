"""The broker objects of a pool: declared idempotently, queues listed, policies applied.

Every controller of a pool declares the same objects with the same arguments at start, so two
controllers starting together agree instead of fighting. Request queues get their dead-letter
exchange as an argument (a queue never exists without it, even before the policy lands); TTL,
delivery limit and length bound come from a policy, so operators can change them live. The
policy is written for the broker's release (`check_broker`): RabbitMQ 4.x gives quorum queues a
delivery limit of 20 where none is set, so `queues.delivery_limit = None` (no limit) is written
as 4.x's -1 there, and left out on 3.x (which refuses -1).

On a cluster (several broker addresses) request queues are quorum queues of
`queues.initial_group_size` replicas with their leaders spread over the nodes, and the pool's
own queues are quorum queues too: losing any one node loses no queue and no message.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import aiormq.exceptions

from osrdyne.controller._broker_settings import QueueSettings
from osrdyne.controller._decisions.pool_state import GroupStatus
from osrdyne.controller._effects.management import ManagementApi
from osrdyne.exceptions import BrokerUnsuitable
from osrdyne.wire import PoolNames

logger = logging.getLogger(__name__)

#: Activity reports older than this are useless: the controller rebuilds state on restart.
ACTIVITY_TTL_MS = 60_000


async def declare_pool(
    connection: aio_pika.abc.AbstractConnection, names: PoolNames, *, replicated: bool = False
) -> None:
    """Declare the pool's exchanges and queues (idempotent).

    The request exchange comes last: once clients can see it, the orphan queue behind its
    alternate exchange is bound, so no request of a starting pool is returned unroutable (a
    client takes that as "no controller" and gives up at once).

    `replicated`: the pool's queues are quorum queues (a cluster). A queue that already
    exists with another type is kept as it is, with a warning: the broker cannot convert it."""
    fanout, direct = aio_pika.ExchangeType.FANOUT, aio_pika.ExchangeType.DIRECT
    channel = await connection.channel()
    try:
        orphan_x = await channel.declare_exchange(names.orphan_exchange, fanout, durable=True)
        dl_x = await channel.declare_exchange(names.dead_letter_exchange, fanout, durable=True)
        activity_x = await channel.declare_exchange(names.activity_exchange, fanout, durable=True)
    finally:
        await channel.close()
    queues: dict[str, tuple[dict[str, Any], aio_pika.abc.AbstractExchange | None]] = {
        # Orphans dead-letter too: one whose client deadline passes while waiting is answered.
        names.orphan_queue: ({"x-dead-letter-exchange": names.dead_letter_exchange}, orphan_x),
        names.dead_letter_queue: ({}, dl_x),
        names.activity_queue: ({"x-message-ttl": ACTIVITY_TTL_MS}, activity_x),
        names.poison_queue: ({}, None),
    }
    for name, (arguments, exchange) in queues.items():
        if replicated:
            arguments = {**arguments, "x-queue-type": "quorum"}
        await _declare_queue(connection, name, arguments, exchange)
    channel = await connection.channel()
    try:
        await channel.declare_exchange(
            names.request_exchange,
            direct,
            durable=True,
            arguments={"alternate-exchange": names.orphan_exchange},
        )
    finally:
        await channel.close()


async def _declare_queue(
    connection: aio_pika.abc.AbstractConnection,
    name: str,
    arguments: dict[str, Any],
    exchange: aio_pika.abc.AbstractExchange | None,
) -> None:
    """Declare a durable queue (bound to `exchange`); an existing one of other arguments (a
    classic queue of a pool that now runs on a cluster) is kept, with a warning."""
    channel = await connection.channel()
    try:
        try:
            queue = await channel.declare_queue(name, durable=True, arguments=arguments)
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            logger.warning("keeping queue %r as it is (%s)", name, exc)
            await channel.close()  # closed by the broker already: a new one
            channel = await connection.channel()
            queue = await channel.declare_queue(name, passive=True)
        if exchange is not None:
            await queue.bind(exchange.name)
    finally:
        if not channel.is_closed:
            await channel.close()


def request_queue_arguments(names: PoolNames, settings: QueueSettings, key: str) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "x-queue-type": settings.type,
        "x-dead-letter-exchange": names.dead_letter_exchange,
        **names.request_queue_arguments(key),
    }
    if settings.type == "quorum":
        # Placement for a cluster: this many replicas, leaders spread over the nodes.
        if settings.initial_group_size is not None:
            arguments["x-quorum-initial-group-size"] = settings.initial_group_size
        if settings.leader_locator is not None:
            arguments["x-queue-leader-locator"] = settings.leader_locator
    return arguments


async def declare_request_queue(
    channel: aio_pika.abc.AbstractChannel,
    name: str,
    *,
    names: PoolNames,
    settings: QueueSettings,
    key: str,
) -> aio_pika.abc.AbstractQueue:
    """Declare `key`'s request queue `name`; one that exists with other arguments (the queue
    type changed, say) is kept and served as it is."""
    arguments = request_queue_arguments(names, settings, key)
    try:
        return await channel.declare_queue(name, durable=True, arguments=arguments)
    except aio_pika.exceptions.ChannelPreconditionFailed as exc:
        logger.warning("request queue %r exists with other arguments: %s", name, exc)
        return await channel.get_queue(name, ensure=False)


def policy_name(names: PoolNames) -> str:
    return f"osrdyne-{names.pool}-requests"


def policy_definition(
    names: PoolNames, settings: QueueSettings, *, broker_version: str
) -> dict[str, Any]:
    definition: dict[str, Any] = {"dead-letter-exchange": names.dead_letter_exchange}
    if settings.message_ttl is not None:
        definition["message-ttl"] = int(settings.message_ttl * 1000)
    if settings.type == "quorum":
        if settings.delivery_limit is not None:
            definition["delivery-limit"] = settings.delivery_limit
        elif major_version(broker_version) >= 4:
            definition["delivery-limit"] = -1  # 4.x's "no limit" (its default is 20)
    if settings.max_length is not None:
        definition["max-length"] = settings.max_length
        definition["overflow"] = "drop-head"
    return definition


def major_version(version: str) -> int:
    """The major release of a RabbitMQ version string ("4.0.5" -> 4); 3 when unreadable (the
    oldest release osrdyne knows, whose policies are the most restricted)."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 3


async def check_broker(api: ManagementApi) -> str:
    """The broker's RabbitMQ version; `BrokerUnsuitable` unless its management API collects
    statistics.

    The controller reads a queue's depth there before it deletes it (a quorum queue whose
    member is down counts 0 to a passive declare, whatever it holds), finds quorum queues
    without a leader by their missing statistics, and shows the nodes' limits and partitions.
    A broker that collects none (`deprecated_features.permit.management_metrics_collection =
    false` on RabbitMQ 4.x, `management_agent.disable_metrics_collector = true`) answers every
    queue without depth and every node without figures: the controller would take every idle
    queue for leaderless and never retire a group. It says so instead, at every session."""
    overview = await api.overview(columns="disable_stats,rabbitmq_version")
    version = str(overview.get("rabbitmq_version") or "?")
    if overview.get("disable_stats") is True:
        raise BrokerUnsuitable(
            f"the broker's management API collects no statistics (RabbitMQ {version}: "
            "deprecated_features.permit.management_metrics_collection = false or "
            "management_agent.disable_metrics_collector = true): osrdyne reads queue depths "
            "and node figures there; permit it (docs/operations.md)"
        )
    return version


async def apply_policy(
    api: ManagementApi, names: PoolNames, settings: QueueSettings, *, broker_version: str
) -> None:
    """Put the request-queue policy (TTL, delivery limit, dead-lettering, length bound) and the
    poison queue's (a length bound: a flood of bad requests cannot fill the broker)."""
    await api.put_policy(
        policy_name(names),
        pattern="^" + re.escape(names.request_queue_prefix),
        definition=policy_definition(names, settings, broker_version=broker_version),
        priority=settings.policy_priority,
        apply_to="queues",
    )
    await api.put_policy(
        poison_policy_name(names),
        pattern="^" + re.escape(names.poison_queue) + "$",
        definition={"max-length": settings.poison_max_length, "overflow": "drop-head"},
        priority=settings.policy_priority,
        apply_to="queues",
    )


def poison_policy_name(names: PoolNames) -> str:
    return f"osrdyne-{names.pool}-poison"


class RequestQueues(dict[str, GroupStatus]):
    """The pool's request queues by key (ACTIVE when bound to the request exchange with the
    key), and the name of each queue that is not the one `PoolNames.request_queue` gives its
    key now: a queue of osrdyne 0.1, named after the raw key, adopted as it is and retired
    by the queue loop (`migration`)."""

    def __init__(
        self,
        statuses: Mapping[str, GroupStatus],
        legacy: Mapping[str, str],
        figures: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(statuses)
        #: key -> the name its existing queue has, for queues of an older naming.
        self.legacy = dict(legacy)
        #: key -> its queue's figures as the same listing gave them (`FIGURE_COLUMNS`): what
        #: `/status` shows, without asking the broker again.
        self.figures = dict(figures or {})
        #: Epoch seconds of the listing.
        self.read_at = time.time()
        self._placement: tuple[dict[str, int], dict[str, int]] | None = None

    def placement(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per broker node: the request queues led from it (a quorum queue's leader, a
        classic queue's node), and the quorum queues with a member there that is not online.
        Counted once per listing (status requests and gauges ask for it again and again)."""
        if self._placement is None:
            leaders: dict[str, int] = {}
            missing: dict[str, int] = {}
            for queue in self.figures.values():
                leader = queue.get("leader") or queue.get("node")
                if isinstance(leader, str):
                    leaders[leader] = leaders.get(leader, 0) + 1
                members, online = queue.get("members"), queue.get("online")
                if isinstance(members, list) and isinstance(online, list):
                    for member in members:
                        if isinstance(member, str) and member not in online:
                            missing[member] = missing.get(member, 0) + 1
            self._placement = (leaders, missing)
        return self._placement


#: The queue figures `/status` shows, read in the same listing as the names: depths, and
#: where the queue lives (`node` of a classic queue; `leader`, `members`, `online` of a
#: quorum queue) for the cluster's health.
FIGURE_COLUMNS = (
    "messages,messages_ready,messages_unacknowledged,consumers,head_message_timestamp,"
    "node,leader,members,online"
)


async def list_request_queues(api: ManagementApi, names: PoolNames) -> RequestQueues:
    """The pool's request queues by key, read back from their names and arguments (both the
    current encoding and osrdyne 0.1's raw names, so an upgrade adopts every queue)."""
    queues = await api.queues(
        name_regex="^" + re.escape(names.request_queue_prefix),
        columns=f"name,arguments,{FIGURE_COLUMNS}",
    )
    keys: dict[str, str] = {}  # queue name -> key
    figures: dict[str, Mapping[str, Any]] = {}
    for queue in queues:
        key = names.key_of_queue(queue["name"], queue.get("arguments"))
        if key is not None:
            keys[queue["name"]] = key
            figures[key] = {c: queue.get(c) for c in FIGURE_COLUMNS.split(",")}
    bound = {
        b["destination"]
        for b in await api.bindings_from(names.request_exchange)
        if b.get("destination_type") == "queue"
        and b["destination"] in keys
        and keys[b["destination"]] == b.get("routing_key")
    }
    statuses: dict[str, GroupStatus] = {}
    legacy: dict[str, str] = {}
    for name, key in keys.items():
        # A key with both queues (a retirement cut short) is bound if either is.
        if name in bound or key not in statuses:
            statuses[key] = GroupStatus.ACTIVE if name in bound else GroupStatus.UNBOUND
        if name != names.request_queue(key):
            legacy[key] = name
    return RequestQueues(statuses, legacy, figures)
