"""Links of the three-node cluster cut for real: packet filter rules on the loopback interface.

Each node of `scripts/ensure_cluster.sh` opens its links to the other nodes from its own
loopback address (node 1 from 127.0.0.2, node 2 from 127.0.0.3, node 3 from 127.0.0.4:
`inet_dist_connect_options`) to the others' distribution ports (25681-25683 on 127.0.0.1).
So a link between two nodes is told apart from every other by its addresses and ports, and an
iptables rule drops its packets while both nodes and every other link go on: a partition, not
a crash. Client links are told apart by the client's port (as the broker lists it).

Every rule lives in one chain of our own (`OSRDYNE-NET`), jumped to from OUTPUT for loopback
packets (each packet on `lo` passes OUTPUT once); `heal()` flushes it, and the fixture that
hands out a `Network` heals after each test whatever happened. Needs root and iptables.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

CHAIN = "OSRDYNE-NET"


def source_address(n: int) -> str:
    """The address node `n` (1-3) opens its links to the other nodes from."""
    return f"127.0.0.{n + 1}"


def dist_port(n: int) -> int:
    return 25680 + n


def amqp_port(n: int) -> int:
    return 5680 + n


def available() -> str | None:
    """None when rules can be set here, else why not."""
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    done = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"iptables cannot list rules: {done.stderr.strip()}"
    return None


class Network:
    """The cuts done to the cluster's links; all undone by `heal()`."""

    def __init__(self) -> None:
        missing = available()
        if missing is not None:
            # A component that cannot start fails the run, never skips it (scripts/setup.sh
            # installs iptables).
            raise RuntimeError(f"cannot cut links: {missing}")
        if self._run("-S", CHAIN, check=False) != 0:
            self._run("-N", CHAIN)
        if self._run("-C", "OUTPUT", "-o", "lo", "-j", CHAIN, check=False) != 0:
            self._run("-I", "OUTPUT", "-o", "lo", "-j", CHAIN)
        self.heal()

    # -- node to node -----------------------------------------------------------------------

    def cut(self, a: int, b: int, *, one_way: bool = False) -> None:
        """Drop what node `a` sends to node `b` and, unless `one_way`, what `b` sends to `a`."""
        self._drop_from_to(a, b)
        if not one_way:
            self._drop_from_to(b, a)

    def isolate(self, n: int) -> None:
        """Node `n` cut from both others (a minority of one); its clients still reach it."""
        for other in (1, 2, 3):
            if other != n:
                self.cut(n, other)

    def _drop_from_to(self, a: int, b: int) -> None:
        # On the link `a` opened: a's packets to b's distribution port.
        self._add("-s", source_address(a), "-p", "tcp", "--dport", str(dist_port(b)))
        # On the link `b` opened: a's answers from its own distribution port to b.
        self._add("-d", source_address(b), "-p", "tcp", "--sport", str(dist_port(a)))

    # -- client to node ---------------------------------------------------------------------

    def cut_connection(self, n: int, client_port: int) -> None:
        """One client's TCP connection to node `n` silenced both ways (its packets dropped):
        neither end is told, each finds out by its heartbeat."""
        for rule in self._connection(n, client_port):
            self._add(*rule)

    def refuse_new_connections(self, n: int) -> None:
        """New AMQP connections to node `n` dropped (their SYN): a client cut from the node
        cannot come back to it while the cut lasts; established connections go on."""
        self._add("-p", "tcp", "--dport", str(amqp_port(n)), "--syn")

    def lose_packets(self, n: int, client_port: int, probability: float) -> None:
        """A lossy link: each packet of one client's connection to node `n`, either way,
        dropped with `probability` (TCP retransmits what is lost)."""
        assert 0 < probability < 1, probability
        for rule in self._connection(n, client_port):
            self._add(*rule, "-m", "statistic", "--mode", "random",
                      "--probability", f"{probability:.3f}")  # fmt: skip

    @staticmethod
    def _connection(n: int, client_port: int) -> list[tuple[str, ...]]:
        port, client = str(amqp_port(n)), str(client_port)
        return [
            ("-p", "tcp", "--sport", client, "--dport", port),
            ("-p", "tcp", "--sport", port, "--dport", client),
        ]

    # -- all of it --------------------------------------------------------------------------

    def rules(self) -> list[str]:
        done = subprocess.run(["iptables", "-S", CHAIN], capture_output=True, text=True)
        return [line for line in done.stdout.splitlines() if line.startswith("-A ")]

    def heal(self) -> None:
        """Every cut undone (the chain flushed)."""
        self._run("-F", CHAIN)

    def _add(self, *match: str) -> None:
        self._run("-A", CHAIN, *match, "-j", "DROP")

    @staticmethod
    def _run(*args: str, check: bool = True) -> int:
        done = subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"iptables {' '.join(args)}: {done.stderr.strip()}")
        return done.returncode


def describe(rules: Sequence[str]) -> str:
    return "; ".join(rules) or "no cut"
