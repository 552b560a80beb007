"""The engine drivers' settings import without their SDKs, and drivers never import each other."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

DRIVERS = Path(__file__).resolve().parents[2] / "drivers"


def test_settings_import_without_the_sdks() -> None:
    code = (
        "import sys\n"
        "sys.modules['docker'] = None\n"  # None in sys.modules makes `import docker` fail
        "sys.modules['kubernetes'] = None\n"
        "sys.modules['dbus_fast'] = None\n"
        "from drivers import docker, kubernetes, systemd\n"
        "docker.DockerSettings(); kubernetes.KubernetesSettings(); systemd.SystemdSettings()\n"
        "try:\n"
        "    docker.DockerDriver(None, docker.DockerSettings())\n"
        "except ImportError:\n"
        "    print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=DRIVERS.parent
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


#: What every driver may import of the others: the protocol, names, and the shared mechanisms.
SHARED = {"base", "names", "sizing", "standby", "key_locks", "_processes"}


@pytest.mark.parametrize(
    "module",
    ["docker", "kubernetes", "memory", "noop", "subprocess", "systemd", *sorted(SHARED)],
)
def test_drivers_do_not_import_each_other(module: str) -> None:
    package = DRIVERS / module  # a driver of several rooms is a package of its own
    paths = sorted(package.rglob("*.py")) if package.is_dir() else [DRIVERS / f"{module}.py"]
    imported = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "drivers":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("drivers."):
                imported.add(node.module.split(".")[1])
    assert imported <= SHARED | {module}, imported
