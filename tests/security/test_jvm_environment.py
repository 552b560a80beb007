"""The worker's JVM starts without its credentials, exits on OutOfMemoryError, and keeps its
safety settings whatever `extra_conf` says.

The shared session is started by `spark_workers.session.build_session`, as a worker starts it,
with a broker URI, a token and a database URL carrying `CANARY` in the environment
(`tests/spark/conftest.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_workers import jvm, session
from tests.spark.conftest import CANARIES, CANARY, settings_for


def test_the_jvm_holds_no_credential(spark: Any) -> None:
    java = spark._jvm.java.lang
    environment = {str(k): str(v) for k, v in java.System.getenv().items()}
    assert not [name for name in environment if name in CANARIES]
    assert not [name for name, value in environment.items() if CANARY in value]
    assert not [n for n in environment if n.startswith(("WORKER_", "OSRDYNE_"))]
    properties = java.System.getProperties()
    assert not [name for name in properties.stringPropertyNames() if CANARY in properties.get(name)]
    # What the kernel says, not only what the JVM reports.
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    assert CANARY.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    assert CANARY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_what_the_jvm_is_launched_without() -> None:
    environ = {
        "WORKER_AMQP_URI": "amqp://osrdyne:pw@broker:5672/%2F",
        "WORKER_KEY": "trips",
        "OSRDYNE_OWNER": "osrdyne:pool",
        "SPARK_WORKER_DATASET_ROOT": "/data",
        "MONITORING_URL": "https://agent:pw@metrics.invalid/push",
        "PATH": "/usr/bin",
        "JAVA_HOME": "/usr/lib/jvm/java-17",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "HADOOP_CONF_DIR": "/etc/hadoop",
        "AWS_SECRET_ACCESS_KEY": "needed-to-read-s3a-datasets",
        "DOCS_URL": "https://example.invalid/a:b",
    }
    kept = jvm.jvm_environment(environ)
    assert sorted(kept) == [
        "AWS_SECRET_ACCESS_KEY",
        "DOCS_URL",
        "HADOOP_CONF_DIR",
        "JAVA_HOME",
        "PATH",
        "SPARK_LOCAL_IP",
    ]


def test_safety_settings_and_the_oom_exit_win_over_extra_conf(spark: Any, tmp_path: Path) -> None:
    conf = session.spark_conf(
        settings_for(
            tmp_path,
            extra_conf={
                "spark.sql.runSQLOnFiles": "true",
                "spark.sql.variable.substitute": "true",
                "spark.driver.extraJavaOptions": "-Dcustom=1",
            },
        )
    )
    assert conf["spark.sql.runSQLOnFiles"] == "false"
    assert conf["spark.sql.variable.substitute"] == "false"
    assert conf["spark.driver.extraJavaOptions"] == "-Dcustom=1 -XX:+ExitOnOutOfMemoryError"
    # The running JVM got it too.
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    assert b"-XX:+ExitOnOutOfMemoryError" in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert spark.conf.get("spark.sql.variable.substitute") == "false"
