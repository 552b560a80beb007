"""A private RabbitMQ node for the tests that stop, crash or restart a broker.

The shared broker on 127.0.0.1:5672 serves every other test (and other people): it is never
touched here. `RabbitNode` runs a node of its own: RabbitMQ 3.10 from the installed Debian
package (`/usr/lib/rabbitmq/bin`), or 4.0 (`version="4"`, the default under
OSRDYNE_RABBITMQ_VERSION=4: tests/broker.py) from the Debian 13 root of
scripts/rabbitmq_root.sh, with every deprecated feature 4.0 permits denied but those named
(scripts/_rabbitmq_nodes.sh). Either has its own node name, AMQP, distribution and management
ports, its own data, log and config files, its own Erlang cookie (in its own HOME), and runs
as the `rabbitmq` user when the tests run as root (as the Debian wrapper does with `su
rabbitmq`). It registers with the machine's epmd on 127.0.0.1 (started by the node if none
runs). Every step is bounded in time; `close()` stops the node, kills whatever is left of it
and removes its directory.

    node = RabbitNode.start_new()      # ~5-15 s on a small machine
    node.amqp_url, node.management_url
    node.restart()                     # graceful: rabbitmqctl stop, then start again
    node.crash(); node.start()         # SIGKILL of the whole node, then start again
    node.close()
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import broker

#: Where the Debian package puts the real scripts (/usr/sbin ones are `su` wrappers), on this
#: machine and in the Debian 13 root alike.
DEBIAN_BIN = Path("/usr/lib/rabbitmq/bin")
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
RUN_AS = "rabbitmq"
#: Bounds of a start and of a graceful stop: on the 2-core machine at a load average of 25-45
#: (2026-12-02) a start took up to 160 s, and a `rabbitmqctl stop` over 30 s, which the old
#: bound turned into a SIGKILL: the graceful restart test then restarted a crashed node.
START_TIMEOUT = 240.0
STOP_TIMEOUT = 120.0


class NodeError(RuntimeError):
    """The private node could not be started or stopped."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tool(name: str) -> str:
    path = DEBIAN_BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise NodeError(f"{name} not found: install the rabbitmq-server package")
    return found


def _root(*args: str) -> str:
    """scripts/rabbitmq_root.sh's answer (`owner`; `build` makes the root if missing)."""
    done = subprocess.run(
        [str(SCRIPTS / "rabbitmq_root.sh"), *args], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise NodeError(f"rabbitmq_root.sh {' '.join(args)}: {done.stderr[-2000:]}")
    return done.stdout.strip()


def deprecated_features_config(permit: tuple[str, ...] | None) -> str:
    """The rabbitmq.conf lines of a 4.0 node on the deprecated features: every one denied but
    those in `permit` (None: the scripts' default, scripts/_rabbitmq_nodes.sh)."""
    env = dict(os.environ)
    if permit is not None:
        env["OSRDYNE_RABBITMQ4_PERMIT"] = " ".join(permit)
    done = subprocess.run(
        ["bash", "-c", f"source {SCRIPTS / '_rabbitmq_nodes.sh'} && deprecated_features_config"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


class RabbitNode:
    def __init__(
        self,
        base: Path,
        *,
        name: str | None = None,
        max_message_mb: int = 32,
        version: str = broker.VERSION,
        permit: tuple[str, ...] | None = None,
    ) -> None:
        self.base = base
        self.nodename = name or f"osrdyne-test-{secrets.token_hex(3)}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.management_port = free_port()
        self.max_message_bytes = max_message_mb * 1024 * 1024
        #: "3" (3.10, this machine's) or "4" (4.0, from the Debian 13 root).
        self.version = version
        #: 4.0: the deprecated features left permitted (None: the scripts' default).
        self.permit = permit
        self.process: subprocess.Popen[bytes] | None = None
        #: Whether the last `stop()` ended the node by itself (False: it was SIGKILLed after
        #: `STOP_TIMEOUT`, a crash and not the graceful stop asked for).
        self.stopped_gracefully = True
        self._user = self._run_as()
        self._write_files()

    # -- where it is ----------------------------------------------------------------------

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    # -- life cycle -----------------------------------------------------------------------

    @classmethod
    def start_new(cls, **kwargs: object) -> RabbitNode:
        base = Path(tempfile.mkdtemp(prefix="osrdyne-rabbit-"))
        node = cls(base, **kwargs)  # type: ignore[arg-type]
        try:
            node.start()
        except BaseException:
            node.close()
            raise
        return node

    def start(self) -> None:
        """Start the node and wait until it serves AMQP and its management API."""
        if self.process is not None and self.process.poll() is None:
            return
        (self.base / "node.pid").unlink(missing_ok=True)  # a crashed node leaves a stale one
        log = (self.base / "log" / "console.log").open("ab")
        self.process = subprocess.Popen(
            self._command("rabbitmq-server"),
            env=self._env(),
            cwd=self.base,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: `crash()` kills all of it
            **self._user,
        )
        log.close()
        try:
            # `wait` first waits for the pid file (the node may not be registered with epmd yet,
            # when `await_startup` would fail at once), then for the node to have booted.
            self.ctl(
                "wait",
                str(self.base / "node.pid"),
                "--timeout",
                str(int(START_TIMEOUT)),
                timeout=START_TIMEOUT + 10,
            )
            self._wait(
                lambda: _port_open(self.port) and _port_open(self.management_port),
                START_TIMEOUT,
                "AMQP and management listeners",
            )
        except BaseException as exc:
            self.crash()
            raise NodeError(
                f"node {self.nodename} did not start ({type(exc).__name__}: {exc}):\n"
                f"{self.log_tail()}"
            ) from None

    def stop(self) -> None:
        """A graceful stop (`rabbitmqctl stop`); SIGKILL if that does not end it in time."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(NodeError, subprocess.TimeoutExpired):
            self.ctl("stop", timeout=STOP_TIMEOUT)
        try:
            self.process.wait(STOP_TIMEOUT)
            self.stopped_gracefully = True
        except subprocess.TimeoutExpired:
            self.stopped_gracefully = False
            self.crash()

    def crash(self) -> None:
        """A hard crash: SIGKILL to every process of the node."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STOP_TIMEOUT)
        self._wait(lambda: not _port_open(self.port), STOP_TIMEOUT, "AMQP port closed")

    def pause(self) -> None:
        """SIGSTOP every process of the node: its sockets stay open and silent (a node cut
        off, as its clients see it until their heartbeats pass)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)

    def restart(self, *, hard: bool = False) -> None:
        self.crash() if hard else self.stop()
        self.start()

    def close(self) -> None:
        """Stop the node for good and remove everything it wrote."""
        try:
            self.stop()
        finally:
            self.crash()
            shutil.rmtree(self.base, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run `rabbitmqctl -n <node> args...` against this node; its output. The bound is
        the CLI's own start (an Erlang VM, in the 4.0 root a chroot too): at load 30 a 4.0
        `eval` took over 20 s (2026-12-02), the call it makes a few milliseconds."""
        try:
            done = subprocess.run(
                self._command("rabbitmqctl", "-n", self.nodename, *args),
                env=self._env(),
                cwd=self.base,
                capture_output=True,
                timeout=timeout,
                **self._user,
            )
        except subprocess.TimeoutExpired as exc:
            raise NodeError(f"rabbitmqctl {' '.join(args)} took longer than {timeout}s") from exc
        if done.returncode != 0:
            raise NodeError(
                f"rabbitmqctl {' '.join(args)}: {done.stdout.decode()} {done.stderr.decode()}"
            )
        return done.stdout.decode()

    def quorum_status(self, queue: str) -> str:
        """`rabbit_quorum_queue:status`: each member's Raft state, log and commit index."""
        return self.ctl("eval", f'rabbit_quorum_queue:status(<<"/">>, <<"{queue}">>).').strip()

    def queue_member(self, queue: str, action: str) -> str:
        """`ra:<action>` (`stop_server`, `restart_server`) on quorum queue `queue`'s Raft
        member on this node; with `whereis`, the member's process (`undefined`: down)."""
        call = (
            "erlang:whereis(Name)"
            if action == "whereis"
            else f"ra:{action}(quorum_queues, {{Name, node()}})"
        )
        return self.ctl(
            "eval",
            f'{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"{queue}">>)), '
            f"{{Name, _}} = amqqueue:get_pid(Q), {call}.",
        ).strip()

    def log_tail(self, lines: int = 40) -> str:
        texts = []
        for path in sorted((self.base / "log").glob("*")):
            with contextlib.suppress(OSError):
                texts.append(
                    f"== {path.name}\n"
                    + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
                )
        return "\n".join(texts)

    @staticmethod
    def _wait(condition: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise NodeError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def _command(self, program: str, *args: str) -> list[str]:
        """The command line of a RabbitMQ program (`rabbitmq-server`, `rabbitmqctl`) for this
        node: 4.0's in the Debian 13 root (rabbitmq_root.sh: its own mount namespace and
        chroot, the same process, pid and process group; the environment passed whole)."""
        if self.version == "3":
            return [_tool(program), *args]
        env = [f"{k}={v}" for k, v in self._env().items()]
        return [
            str(SCRIPTS / "rabbitmq_root.sh"), "run", "--bind", str(self.base), "--",
            "/usr/bin/env", "-i", *env, str(DEBIAN_BIN / program), *args,
        ]  # fmt: skip

    def _run_as(self) -> dict[str, object]:
        """Run as `rabbitmq` when we are root (as the Debian wrapper does), else as us. The
        4.0 root's `rabbitmq_root.sh run` changes to its own `rabbitmq` itself."""
        if os.geteuid() != 0 or self.version != "3":
            return {}
        try:
            user = pwd.getpwnam(RUN_AS)
        except KeyError:
            return {}
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def _env(self) -> dict[str, str]:
        # A test run's mark (scripts/test.sh) too: it finds what it started at its end.
        kept = ("PATH", "LANG", "LC_ALL", "TERM", "OSRDYNE_TEST_RUN")
        keep = {k: v for k, v in os.environ.items() if k in kept}
        if self.version != "3":
            keep["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"  # the Debian 13 root's
        b = self.base
        return {
            **keep,
            "HOME": str(b),  # holds this node's own .erlang.cookie
            "LC_ALL": "C.UTF-8",
            "RABBITMQ_CONF_ENV_FILE": str(b / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(b / "mnesia"),
            "RABBITMQ_LOG_BASE": str(b / "log"),
            "RABBITMQ_PID_FILE": str(b / "node.pid"),
            "RABBITMQ_CONFIG_FILE": str(b / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(b / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(b / "enabled_plugins"),
            "RABBITMQ_ALLOW_INPUT": "",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_FLAGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def _write_files(self) -> None:
        b = self.base
        for sub in ("mnesia", "log"):
            (b / sub).mkdir(parents=True, exist_ok=True)
        (b / "rabbitmq-env.conf").write_text("# private test node: everything comes from env\n")
        (b / "enabled_plugins").write_text("[rabbitmq_management,rabbitmq_event_exchange].\n")
        (b / "advanced.config").write_text("[].\n")
        (b / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            f"management.tcp.port = {self.management_port}\n"
            "management.tcp.ip = 127.0.0.1\n"
            "loopback_users.guest = true\n"
            "disk_free_limit.absolute = 10MB\n"
            f"max_message_size = {self.max_message_bytes}\n"
            "collect_statistics_interval = 1000\n"
            "log.console = false\n"
            "log.file.level = info\n"
            + (deprecated_features_config(self.permit) if self.version != "3" else "")
        )
        cookie = b / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20).upper())
        cookie.chmod(0o400)
        uid, gid = self._user.get("user"), self._user.get("group")
        if self.version != "3" and os.geteuid() == 0:
            uid, gid = (int(i) for i in _root("owner").split(":"))  # the root's `rabbitmq`
        if uid is not None:
            os.chown(b, uid, gid)  # type: ignore[arg-type]
            for path in b.rglob("*"):
                os.chown(path, uid, gid)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def rabbit_node() -> Iterator[RabbitNode]:
    """A private node shared by this session's broker-fault tests (they restart it freely)."""
    try:
        node = RabbitNode.start_new()
    except NodeError as exc:
        pytest.fail(f"cannot start a private RabbitMQ node: {exc}")
    try:
        yield node
    finally:
        node.close()
