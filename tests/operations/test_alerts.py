"""The operators' alert rules (deploy/prometheus/alerts.yml) pass `promtool check rules`, and
their unit tests (deploy/prometheus/alerts_test.yml) pass `promtool test rules`: each alert
fires on the series it is about, for its pool, and not before its `for`.

promtool comes with Debian's `prometheus` package (`apt-get install prometheus`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=RULES, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_alert_rules_are_valid() -> None:
    done = promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alert_rules_pass_their_unit_tests() -> None:
    done = promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test() -> None:
    rules = (RULES / "alerts.yml").read_text()
    tests = (RULES / "alerts_test.yml").read_text()
    alerts = [line.split(":", 1)[1].strip() for line in rules.splitlines() if "- alert:" in line]
    assert alerts
    assert [a for a in alerts if f"alertname: {a}" not in tests] == []
