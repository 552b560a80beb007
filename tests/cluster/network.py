"""Links of the three-node cluster cut for real: packet filter rules on the loopback interface.

Each node of `scripts/ensure_cluster.sh` opens its links to the other nodes from its own
loopback address (node 1 from 127.0.0.2, node 2 from 127.0.0.3, node 3 from 127.0.0.4:
`inet_dist_connect_options`) to the others' distribution ports (25681-25683 on 127.0.0.1);
the second cluster's nodes from 127.0.0.5-7 to 25684-25686 (RabbitMQ 4.0's clusters: 127.0.0.8-10
to 25687-25689 and 127.0.0.11-13 to 25690-25692).
So a link between two nodes is told apart from every other by its addresses and ports, and an
iptables rule drops its packets while both nodes and every other link go on: a partition, not
a crash. Client links are told apart by the client's port (as the broker lists it).

Every rule lives in a chain of our own, one per cluster (`OSRDYNE-NET`, `OSRDYNE-NET2`; on
4.0 `OSRDYNE-NET-4`, `OSRDYNE-NET2-4`),
jumped to from OUTPUT for loopback packets (each packet on `lo` passes OUTPUT once); `heal()`
flushes it, and the fixture that hands out a `Network` heals after each test whatever
happened. The rules name the cluster's own addresses and ports: cutting one cluster leaves the
other alone. Needs root and iptables.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from tests import broker


def available() -> str | None:
    """None when rules can be set here, else why not."""
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    done = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"iptables cannot list rules: {done.stderr.strip()}"
    return None


class Network:
    """The cuts done to the links of cluster `cluster` (1 or 2) of RabbitMQ `version` (as
    scripts/ensure_cluster.sh numbers them); all undone by `heal()`. Nodes are numbered 1-3
    in either cluster."""

    def __init__(self, cluster: int = 1, *, version: str = broker.VERSION) -> None:
        self.chain = ("OSRDYNE-NET" if cluster == 1 else f"OSRDYNE-NET{cluster}") + (
            "-4" if version == "4" else ""
        )
        #: What the cluster's node numbers add to 1-3 (its ports and addresses).
        self.offset = 3 * (cluster - 1) + (6 if version == "4" else 0)
        missing = available()
        if missing is not None:
            # A component that cannot start fails the run, never skips it (scripts/setup.sh
            # installs iptables).
            raise RuntimeError(f"cannot cut links: {missing}")
        if self._run("-S", self.chain, check=False) != 0:
            self._run("-N", self.chain)
        if self._run("-C", "OUTPUT", "-o", "lo", "-j", self.chain, check=False) != 0:
            self._run("-I", "OUTPUT", "-o", "lo", "-j", self.chain)
        self.heal()

    def source_address(self, n: int) -> str:
        """The address node `n` (1-3) opens its links to the other nodes from."""
        return f"127.0.0.{self.offset + n + 1}"

    def dist_port(self, n: int) -> int:
        return 25680 + self.offset + n

    def amqp_port(self, n: int) -> int:
        return 5680 + self.offset + n

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
        self._add("-s", self.source_address(a), "-p", "tcp", "--dport", str(self.dist_port(b)))
        # On the link `b` opened: a's answers from its own distribution port to b.
        self._add("-d", self.source_address(b), "-p", "tcp", "--sport", str(self.dist_port(a)))

    # -- client to node ---------------------------------------------------------------------

    def cut_connection(self, n: int, client_port: int) -> None:
        """One client's TCP connection to node `n` silenced both ways (its packets dropped):
        neither end is told, each finds out by its heartbeat."""
        for rule in self._connection(n, client_port):
            self._add(*rule)

    def refuse_new_connections(self, n: int) -> None:
        """New AMQP connections to node `n` dropped (their SYN): a client cut from the node
        cannot come back to it while the cut lasts; established connections go on."""
        self._add("-p", "tcp", "--dport", str(self.amqp_port(n)), "--syn")

    def lose_packets(self, n: int, client_port: int, probability: float) -> None:
        """A lossy link: each packet of one client's connection to node `n`, either way,
        dropped with `probability` (TCP retransmits what is lost)."""
        assert 0 < probability < 1, probability
        for rule in self._connection(n, client_port):
            self._add(*rule, "-m", "statistic", "--mode", "random",
                      "--probability", f"{probability:.3f}")  # fmt: skip

    def _connection(self, n: int, client_port: int) -> list[tuple[str, ...]]:
        port, client = str(self.amqp_port(n)), str(client_port)
        return [
            ("-p", "tcp", "--sport", client, "--dport", port),
            ("-p", "tcp", "--sport", port, "--dport", client),
        ]

    # -- all of it --------------------------------------------------------------------------

    def rules(self) -> list[str]:
        done = subprocess.run(["iptables", "-S", self.chain], capture_output=True, text=True)
        return [line for line in done.stdout.splitlines() if line.startswith("-A ")]

    def heal(self) -> None:
        """Every cut undone (the chain flushed)."""
        self._run("-F", self.chain)

    def _add(self, *match: str) -> None:
        self._run("-A", self.chain, *match, "-j", "DROP")

    @staticmethod
    def _run(*args: str, check: bool = True) -> int:
        done = subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"iptables {' '.join(args)}: {done.stderr.strip()}")
        return done.returncode


def describe(rules: Sequence[str]) -> str:
    return "; ".join(rules) or "no cut"
