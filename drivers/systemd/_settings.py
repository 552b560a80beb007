"""The settings of the systemd driver (`[driver.systemd]`); they import without dbus-fast."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
from pydantic import Field

from drivers.systemd import _environment, _names

_TEMPLATE = re.compile(r"^[A-Za-z0-9:_.\\-]{1,100}@\.service$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_BUS_ADDRESS = re.compile(r"^unix:(path=/[^;,=\s]{1,200}|abstract=[^;,=\s]{1,100})$")


class SystemdSettings(pydantic.BaseModel):
    """Settings of the systemd driver (`[driver.systemd]` in the controller's configuration)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    bus_address: str | None = Field(
        default=None,
        description="D-Bus address of the bus systemd listens on, 'unix:path=/...' or "
        "'unix:abstract=...'. None: the system bus (DBUS_SYSTEM_BUS_ADDRESS, else "
        "unix:path=/run/dbus/system_bus_socket).",
    )
    template: str = Field(
        default="osrdyne-worker@.service",
        description="The template unit whose instances are the worker groups (installed "
        "on the machine: deploy/systemd/osrdyne-worker@.service).",
    )
    environment_directory: str = Field(
        default="/run/osrdyne/workers",
        description="Directory of the per-instance environment files; must be the one the "
        "template's EnvironmentFile= names (created 0700 if missing).",
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment of the workers; the protocol's WORKER_* variables "
        "are always set by the driver and win over these.",
    )
    workers: int = Field(
        default=1,
        ge=1,
        lt=_names.MAX_REPLICAS,
        description="Units per worker group (the group of a key is that many instances, "
        "a replica index in each name but the first); the group scaler (`[scaling]`) "
        "resizes a running group from there.",
    )
    max_groups: int | None = Field(
        default=None,
        ge=1,
        description="Most worker groups at once; new keys beyond it are answered "
        "`overloaded` (reason `driver_capacity`). None: no cap of the driver's own.",
    )
    max_units: int | None = Field(
        default=None,
        ge=1,
        description="Most units at once, every group's counted: a group grows only into "
        "the units it leaves, and the units groups run beyond their `workers` count "
        "against the groups offered to new keys (`overloaded`, reason `driver_capacity`). "
        "At least `workers`. None: no cap of the driver's own.",
    )
    call_timeout: float = Field(default=30.0, gt=0, le=600, description="Seconds per D-Bus call.")
    stop_wait: float = Field(
        default=90.0,
        gt=0,
        le=3600,
        description="Seconds `stop` waits for a unit to go (the template's TimeoutStopSec= "
        "kills the worker before).",
    )
    failed_restart_delay: float = Field(
        default=30.0,
        ge=0,
        description="A unit systemd left failed (crash loop past its start limit, failed "
        "start) is started again after this many seconds.",
    )

    @pydantic.field_validator("bus_address")
    @classmethod
    def _check_bus_address(cls, value: str | None) -> str | None:
        if value is not None and not _BUS_ADDRESS.match(value):
            raise ValueError(
                "bus_address must be one 'unix:path=/absolute/path' or 'unix:abstract=name'"
            )
        return value

    @pydantic.field_validator("template")
    @classmethod
    def _check_template(cls, value: str) -> str:
        if not _TEMPLATE.match(value):
            raise ValueError(
                "template must be a template service name like 'osrdyne-worker@.service' "
                "(letters, digits and ':_.\\-' before the '@')"
            )
        return value

    @pydantic.field_validator("environment_directory")
    @classmethod
    def _check_directory(cls, value: str) -> str:
        path = Path(value)
        if not path.is_absolute() or ".." in path.parts or _environment.CONTROL.search(value):
            raise ValueError("environment_directory must be an absolute path without '..'")
        if len(value) > 200:
            raise ValueError("environment_directory is longer than 200 characters")
        return value

    @pydantic.field_validator("environment")
    @classmethod
    def _check_environment(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name")
            problem = _environment.value_problem(text)
            if problem is not None:
                raise ValueError(f"environment variable {name}: {problem}")
        return value

    @pydantic.model_validator(mode="after")
    def _check_units(self) -> SystemdSettings:
        if self.max_units is not None and self.max_units < self.workers:
            raise ValueError(
                f"max_units ({self.max_units}) is below workers ({self.workers}): not even "
                "one group would fit"
            )
        return self
