"""`WorkerSettings` read from the environment a driver sets: every value checked at start,
every problem named at once, and the worker's start importing neither pydantic nor
prometheus-client nor OpenTelemetry (each cost a never-seen key's first answer)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from worker_sdk import WorkerSettings
from worker_sdk.settings import SettingsError

KEYED = {
    "WORKER_ID": "w1",
    "WORKER_KEY": "k",
    "WORKER_POOL": "p",
    "WORKER_REQUESTS_QUEUE": "p-req-k",
    "WORKER_ACTIVITY_EXCHANGE": "p-activity-xchg",
}


def test_a_driver_s_environment_is_read_with_the_defaults() -> None:
    settings = WorkerSettings.from_environment(KEYED)
    assert (settings.id, settings.key, settings.pool) == ("w1", "k", "p")
    assert settings.concurrency == 4
    assert settings.metrics_port is None
    assert settings.log_json is False
    assert settings.standby_queue is None


def test_values_are_converted_and_unknown_variables_ignored() -> None:
    env = {
        **KEYED,
        "WORKER_CONCURRENCY": " 16 ",
        "WORKER_ACTIVITY_INTERVAL": "0.5",
        "WORKER_HANDLER_TIMEOUT": "2",
        "WORKER_LOG_JSON": "Yes",
        "WORKER_METRICS_PORT": "0",
        "WORKER_SLOT": "3",  # a driver's own variable
    }
    settings = WorkerSettings.from_environment(env)
    assert settings.concurrency == 16
    assert settings.activity_interval == 0.5
    assert settings.handler_timeout == 2.0 and isinstance(settings.handler_timeout, float)
    assert settings.log_json is True
    assert settings.metrics_port == 0


def test_an_empty_value_leaves_an_optional_setting_unset() -> None:
    settings = WorkerSettings.from_environment({**KEYED, "WORKER_METRICS_PORT": ""})
    assert settings.metrics_port is None


def test_overrides_win_over_the_environment() -> None:
    settings = WorkerSettings.from_environment(
        {**KEYED, "WORKER_CONCURRENCY": "not a number"}, concurrency=2
    )
    assert settings.concurrency == 2


def test_a_standby_worker_needs_no_key() -> None:
    env = {k: v for k, v in KEYED.items() if k not in ("WORKER_KEY", "WORKER_REQUESTS_QUEUE")}
    settings = WorkerSettings.from_environment({**env, "WORKER_STANDBY_QUEUE": "p-standby-w1"})
    assert settings.standby_queue == "p-standby-w1" and settings.key == ""
    with pytest.raises(SettingsError, match="WORKER_KEY and WORKER_REQUESTS_QUEUE are required"):
        WorkerSettings.from_environment(env)


def test_every_problem_is_named_at_once() -> None:
    env = {
        "WORKER_POOL": "p",
        "WORKER_CONCURRENCY": "many",
        "WORKER_LOG_JSON": "perhaps",
        "WORKER_DRAIN_TIMEOUT": "1e400x",
    }
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_environment(env)
    assert caught.value.problems == [
        "WORKER_ID is required",
        "WORKER_ACTIVITY_EXCHANGE is required",
        "WORKER_CONCURRENCY='many': not an integer",
        "WORKER_DRAIN_TIMEOUT='1e400x': not a number",
        "WORKER_LOG_JSON='perhaps': not a boolean (true/false, yes/no, on/off, 1/0)",
    ]
    # Values that read but are out of bounds, all named too.
    bad = {"WORKER_AMQP_URI": "amqp://a:5681/%2F,a:5682", "WORKER_CONCURRENCY": "0"}
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_environment({**KEYED, **bad})
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "concurrency (WORKER_CONCURRENCY)",
        "amqp_uri (WORKER_AMQP_URI)",
    ]


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("WORKER_CONCURRENCY", "0", "is less than 1"),
        ("WORKER_ACTIVITY_INTERVAL", "0", "is not greater than 0"),
        ("WORKER_ACTIVITY_INTERVAL", "nan", "is not a finite number"),
        ("WORKER_HANDLER_TIMEOUT", "inf", "is not a finite number"),
        ("WORKER_STALL_GRACE", "-1", "is less than 0"),
        ("WORKER_METRICS_PORT", "65536", "is greater than 65535"),
        ("WORKER_AMQP_URI", "amqp://a:5681/%2F,a:5682", "not an AMQP URI"),
    ],
)
def test_values_out_of_bounds_are_refused(variable: str, value: str, problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        WorkerSettings.from_environment({**KEYED, variable: value})


def test_values_given_in_code_are_checked_too() -> None:
    with pytest.raises(SettingsError, match="'4' is not an integer"):
        WorkerSettings(
            id="w", key="k", pool="p", requests_queue="q", activity_exchange="x", concurrency="4"
        )  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match="True is not an integer"):
        WorkerSettings(
            id="w", key="k", pool="p", requests_queue="q", activity_exchange="x", concurrency=True
        )


def test_a_worker_start_imports_only_what_it_needs() -> None:
    """The echo worker's module, imported in a fresh interpreter: none of the packages a
    worker needs only when asked (metrics served, tracing configured) is loaded."""
    probe = (
        "import sys, worker_sdk.worker; "
        "print(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'pydantic', 'pydantic_settings', 'prometheus_client', 'opentelemetry', 'structlog'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
