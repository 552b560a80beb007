"""The one place that maps a driver kind to its settings model and its factory.

A new driver is one module (its settings model and its class) and one line in `KINDS`; the
controller's `[driver]` settings, the configuration page and `make_driver` all read them from
here. Drivers never import each other: this module is the only one that knows them all.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Any

import pydantic

from drivers import base
from drivers.docker import DockerDriver, DockerSettings
from drivers.kubernetes import KubernetesDriver, KubernetesSettings
from drivers.noop import NoopDriver
from drivers.subprocess import SubprocessDriver, SubprocessSettings
from drivers.systemd import SystemdDriver, SystemdSettings


class NoSettings(pydantic.BaseModel):
    """A driver without options."""

    model_config = pydantic.ConfigDict(extra="forbid")


@dataclasses.dataclass(frozen=True)
class DriverKind:
    """How to build one kind of driver."""

    #: Builds the driver from the pool's context and its settings (an instance of `settings`).
    factory: Callable[[base.PoolContext, Any], base.Driver]
    #: The model of its `[driver.<section>]` options.
    settings: type[pydantic.BaseModel] = NoSettings
    #: The section it reads; kinds may share one (keda and hpa read `[driver.kubernetes]`).
    section: str | None = None
    #: The section may be left out: its defaults make a working driver.
    defaults_work: bool = False


def _keda(context: base.PoolContext, settings: KubernetesSettings) -> KubernetesDriver:
    if settings.hpa.enabled:
        raise base.DriverConfigurationError(
            "driver 'keda' with [driver.kubernetes.hpa] enabled: both would scale the groups"
        )
    keda = settings.keda.model_copy(update={"enabled": True})
    return KubernetesDriver(context, settings.model_copy(update={"keda": keda}))


def _hpa(context: base.PoolContext, settings: KubernetesSettings) -> KubernetesDriver:
    if settings.keda.enabled:
        raise base.DriverConfigurationError(
            "driver 'hpa' with [driver.kubernetes.keda] enabled: both would scale the groups"
        )
    hpa = settings.hpa.model_copy(update={"enabled": True})
    return KubernetesDriver(context, settings.model_copy(update={"hpa": hpa}))


KINDS: dict[str, DriverKind] = {
    "subprocess": DriverKind(
        SubprocessDriver, SubprocessSettings, section="subprocess", defaults_work=True
    ),
    "noop": DriverKind(lambda context, _: NoopDriver(context)),
    "docker": DriverKind(DockerDriver, DockerSettings, section="docker"),
    "kubernetes": DriverKind(KubernetesDriver, KubernetesSettings, section="kubernetes"),
    "keda": DriverKind(_keda, KubernetesSettings, section="kubernetes"),
    "hpa": DriverKind(_hpa, KubernetesSettings, section="kubernetes"),
    "systemd": DriverKind(SystemdDriver, SystemdSettings, section="systemd", defaults_work=True),
}

#: Every `[driver.<section>]` and the model of its options.
SECTIONS: dict[str, type[pydantic.BaseModel]] = {
    kind.section: kind.settings for kind in KINDS.values() if kind.section is not None
}


def nearest(name: str, choices: list[str]) -> str:
    """ " (did you mean 'x'?)" for the closest of `choices`, or an empty string."""
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown driver {kind!r}{nearest(kind, sorted(KINDS))}")
    return kind


def parse_sections(values: dict[str, Any]) -> dict[str, pydantic.BaseModel]:
    """The `[driver.<section>]` tables of `values`, each validated by its driver's model."""
    parsed: dict[str, pydantic.BaseModel] = {}
    for section, options in values.items():
        model = SECTIONS.get(section)
        if model is None:
            hint = nearest(section, [*SECTIONS, "kind"])
            raise ValueError(f"unknown driver option or section {section!r}{hint}")
        parsed[section] = options if isinstance(options, model) else model.model_validate(options)
    return parsed


def make_driver(
    kind: str, sections: dict[str, pydantic.BaseModel], context: base.PoolContext
) -> base.Driver:
    """The driver of `kind`, built from its section of `sections`."""
    entry = KINDS[check_kind(kind)]
    if entry.section is None:
        return entry.factory(context, NoSettings())
    options = sections.get(entry.section)
    if options is None:
        if not entry.defaults_work:
            raise base.DriverConfigurationError(
                f"driver {kind!r} needs a [driver.{entry.section}] section"
            )
        options = entry.settings()
    return entry.factory(context, options)
