"""The worker's JVM: launched without the broker's credentials, ended by an OutOfMemoryError,
and watched, so that a dead JVM ends the worker instead of leaving it half alive.

pyspark launches the JVM (`spark-submit`) with a copy of `os.environ`. While it does,
`launch_environment` withholds every variable the JVM has no use for that may carry a secret:

- the osrdyne protocol's `WORKER_*` (broker URI with its password...) and `OSRDYNE_*`
  variables, and this package's `SPARK_WORKER_*` settings: read by the worker before Spark
  starts, the JVM gets what it needs of them as Spark configuration. (A JVM carrying
  `OSRDYNE_OWNER`/`OSRDYNE_SLOT` also looked like a worker of its own to the subprocess
  driver's adoption scan.)
- any variable whose value holds a URL with a password (`scheme://user:password@host`).

Credentials the JVM itself needs to read the data (`AWS_*`, `HADOOP_*`, ...) are kept; the
Python process's environment is restored once the JVM runs.

`-XX:+ExitOnOutOfMemoryError` (see `driver_java_options`) makes an exhausted heap end the JVM
(exit code 3) instead of leaving threads dead inside a live process. `Watch` waits for the
JVM process to exit and tells its subscribers; `is_connection_error` recognises what py4j
raises once it is gone (`ConnectionRefusedError` for the call in flight and every later one).

`no_delay` turns Nagle's algorithm off on the JVM's end of py4j's connections: py4j 0.10.9.9
(Spark 4.3's) writes an answer of over 8 KB in two parts, and the second waited for the
Python side's delayed ACK, 40 ms on Linux (py4j#516; fixed upstream by py4j#592, in no
release yet). The analysed plan of a grouped, sorted client query is such an answer: the SQL
guard took 60 ms for it instead of 11 (bench/query_bench.py, 2026-12-02).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Variables the JVM never gets (see the module docstring).
WITHHELD_PREFIXES = ("WORKER_", "OSRDYNE_", "SPARK_WORKER_")
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s@:]*:[^/\s@]+@")

#: The JVM option that turns an OutOfMemoryError into the JVM's exit.
EXIT_ON_OOM = "-XX:+ExitOnOutOfMemoryError"

#: Exit codes of a JVM that ran out of memory: HotSpot's `ExitOnOutOfMemoryError`, and
#: Spark's own exit on a fatal OOM in a task (`SparkExitCode.OOM`).
OOM_EXIT_CODES = frozenset({3, 52})

_environ_lock = threading.Lock()


def withheld(name: str, value: str) -> bool:
    """Whether the JVM must be launched without this environment variable."""
    return name.startswith(WITHHELD_PREFIXES) or bool(_URL_WITH_PASSWORD.search(value))


def jvm_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What the JVM may inherit of `environ`."""
    return {name: value for name, value in environ.items() if not withheld(name, value)}


@contextlib.contextmanager
def launch_environment() -> Iterator[list[str]]:
    """`os.environ` without the withheld variables (their names are yielded), restored after:
    wrap the call that launches the JVM (`SparkSession.builder.getOrCreate()`)."""
    with _environ_lock:
        removed = {
            name: os.environ.pop(name)
            for name in list(os.environ)
            if withheld(name, os.environ.get(name, ""))
        }
        try:
            yield sorted(removed)
        finally:
            os.environ.update(removed)


def driver_java_options(configured: str | None) -> str:
    """`spark.driver.extraJavaOptions`: the configured options plus `EXIT_ON_OOM`."""
    options = (configured or "").split()
    if EXIT_ON_OOM not in options:
        options.append(EXIT_ON_OOM)
    return " ".join(options)


@dataclasses.dataclass(frozen=True)
class JvmLost:
    """Why the JVM is gone."""

    #: `resources` (it ran out of memory) or `jvm_lost` (any other exit, or unreachable).
    reason: str
    #: Its exit code, when its process could be watched.
    exit_code: int | None

    @classmethod
    def from_exit(cls, code: int | None) -> JvmLost:
        return cls("resources" if code in OOM_EXIT_CODES else "jvm_lost", code)

    @property
    def cause(self) -> str:
        code = "" if self.exit_code is None else f" (exit code {self.exit_code})"
        if self.reason == "resources":
            return f"the Spark JVM ran out of memory{code}"
        return f"the Spark JVM is gone{code}"

    @property
    def message(self) -> str:
        """What the callers in flight are told."""
        return f"{self.cause}; the worker restarts"


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the JVM cannot be reached any more."""
    from py4j.protocol import Py4JNetworkError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError | Py4JNetworkError | BrokenPipeError | EOFError):
            return True
        text = str(current)
        if "Answer from Java side is empty" in text or "Error while sending or receiving" in text:
            return True
        current = current.__cause__ or current.__context__
    return False


def is_stream_error(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a broken Arrow stream: what a collect reading the
    JVM's results reports when the JVM dies under it (`ArrowInvalid: Tried reading schema
    message, was null or length 0`), as a query whose data Arrow cannot take also can."""
    import pyarrow

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, pyarrow.ArrowException):
            return True
        current = current.__cause__ or current.__context__
    return False


def no_delay(spark: SparkSession) -> int:
    """Set TCP_NODELAY on the JVM's end of every py4j connection open now (one per Python
    thread that has called the JVM; see the module docstring), and say how many were set.

    Called when the session starts and when a thread first runs Spark work for a request
    (`backend.Embedded.in_group`). py4j keeps its connections in a private field of its
    server (`py4j_sockets`); a py4j that holds them otherwise is logged and left alone."""
    try:
        sockets = py4j_sockets(spark)
    except Exception as exc:
        if is_connection_error(exc):
            raise
        logger.warning("py4j's connections left with Nagle's algorithm on: %s", exc)
        return 0
    done = 0
    for socket in sockets:
        try:
            socket.setTcpNoDelay(True)
            done += 1
        except Exception as exc:  # a connection closing meanwhile (its thread ended)
            if is_connection_error(exc):
                raise
    return done


def py4j_sockets(spark: SparkSession) -> list[Any]:
    """The JVM's end (`java.net.Socket`) of every py4j connection open now: py4j keeps its
    connections in a private field of its server, read by reflection."""
    gateway: Any = spark.sparkContext._gateway
    field = gateway.jvm.py4j.GatewayServer._java_lang_class.getDeclaredField("connections")
    field.setAccessible(True)
    return [c.getSocket() for c in field.get(gateway.java_gateway_server).toArray()]


Subscriber = Callable[[JvmLost], Any]


class Watch:
    """A thread waiting for the JVM process to exit, then telling every subscriber once."""

    _by_pid: ClassVar[dict[int, Watch]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, process: Any) -> None:
        self.pid: int = process.pid
        self._process = process
        self._exited = threading.Event()
        self._subscribers: list[weakref.WeakMethod[Subscriber] | Subscriber] = []
        #: Set once the JVM exited.
        self.lost: JvmLost | None = None
        thread = threading.Thread(target=self._wait, name=f"jvm-watch-{self.pid}", daemon=True)
        thread.start()

    @classmethod
    def of(cls, spark: SparkSession) -> Watch | None:
        """The watch of the JVM behind `spark` (None when pyspark did not launch it: it was
        given a gateway by `PYSPARK_GATEWAY_PORT`)."""
        from pyspark import SparkContext

        process = getattr(SparkContext._gateway, "proc", None)
        if process is None:
            return None
        with cls._lock:
            watch = cls._by_pid.get(process.pid)
            if watch is None:
                watch = cls._by_pid[process.pid] = cls(process)
            return watch

    def subscribe(self, callback: Subscriber) -> None:
        """Call `callback(lost)` when the JVM exits (bound methods are held weakly)."""
        ref = weakref.WeakMethod(callback) if hasattr(callback, "__self__") else callback
        with self._lock:
            self._subscribers.append(ref)
        if self.lost is not None:
            callback(self.lost)

    def unsubscribe(self, callback: Subscriber) -> None:
        with self._lock:
            self._subscribers = [s for s in self._subscribers if _target(s) not in (None, callback)]

    def wait_lost(self, timeout: float) -> JvmLost | None:
        """The JVM's exit, once it happened within `timeout` seconds, else None."""
        self._exited.wait(timeout)
        return self.lost

    def _wait(self) -> None:
        code = self._process.wait()
        self.lost = JvmLost.from_exit(code)
        self._exited.set()
        with self._lock:
            callbacks = [_target(s) for s in self._subscribers]
        for callback in callbacks:
            if callback is not None:
                try:
                    callback(self.lost)
                except Exception:  # one subscriber's failure must not hide the exit from others
                    logger.exception("JVM exit subscriber failed")


def _target(ref: Any) -> Subscriber | None:
    return ref() if isinstance(ref, weakref.WeakMethod) else ref
