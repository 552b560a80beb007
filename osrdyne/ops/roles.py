"""The RabbitMQ users a pool needs, one per role, with the narrowest permissions.

docs/security.md explains the threat model; this module is where the permissions are written
down once: `osrdyne roles POOL` prints the `rabbitmqctl` commands that create them, and the
security tests create them on a real broker and run a pool under them.

    role        configure   write                              read
    controller  ^P-         ^(P-.*|amq\\.default)$              ^(P-.*|amq\\.rabbitmq\\.event)$
    worker      (nothing)   ^(P-activity-xchg|amq\\.default)$   ^P-req-
    client      (nothing)   ^P-req-xchg$                       (nothing)

Workers answer through the default exchange, which RabbitMQ checks on the exchange, not on
the queue it routes to: within one vhost a worker can reach any queue it can name. Pools that
do not trust each other's workers belong in vhosts of their own.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

from osrdyne import wire


@dataclasses.dataclass(frozen=True)
class Role:
    """A role's RabbitMQ permissions (regular expressions over resource names) and tags."""

    name: str
    configure: str
    write: str
    read: str
    #: `policymaker`: the controller applies its policies through the management API.
    tags: str = ""
    why: str = ""


def roles(pool: str) -> list[Role]:
    """The three roles of `pool`."""
    names = wire.PoolNames(pool)
    own = re.escape(pool + "-")
    return [
        Role(
            "controller",
            configure=f"^{own}",
            write=f"^({own}.*|amq\\.default)$",
            # The broker's events (a queue deleted behind its back), when the plugin is on.
            read=f"^({own}.*|amq\\.rabbitmq\\.event)$",
            tags="policymaker",
            why="declares and consumes the pool's objects, forwards orphans, answers errors",
        ),
        Role(
            "worker",
            configure="^$",
            write=f"^({re.escape(names.activity_exchange)}|amq\\.default)$",
            read=f"^{re.escape(names.request_queue_prefix)}",
            why="consumes its group's queue, answers, reports activity",
        ),
        Role(
            "client",
            configure="^$",
            write=f"^{re.escape(names.request_exchange)}$",
            read="^$",
            why="publishes requests, reads answers through direct reply-to",
        ),
    ]


def rabbitmqctl(pool: str, *, vhost: str = "/", prefix: str | None = None) -> list[str]:
    """Shell commands creating the role users of `pool` (passwords read from the terminal)."""
    lines = []
    for role in roles(pool):
        user = f"{prefix or pool}-{role.name}"
        lines += [
            f"# {role.name}: {role.why}",
            f"rabbitmqctl add_user {shlex.quote(user)}",
            f"rabbitmqctl set_user_tags {shlex.quote(user)} {role.tags}".rstrip(),
            "rabbitmqctl set_permissions -p "
            + " ".join(
                shlex.quote(v) for v in (vhost, user, role.configure, role.write, role.read)
            ),
        ]
    return lines
