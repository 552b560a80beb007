"""Render the controller's settings as Markdown: docs/configuration.md is generated from the
models themselves (`python -m osrdyne.ops._config_doc > docs/configuration.md`), and a test keeps
the two in sync, so no option goes undocumented."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from drivers import registry
from osrdyne.controller import DriverSettings, Settings

HEADER = """# Configuration

The controller reads a TOML file (`osrdyne run --config FILE`) under environment overrides:
`OSRDYNE_<SECTION>__<OPTION>` (e.g. `OSRDYNE_GROUPS__UNBIND_DELAY=60`, `OSRDYNE_POOL=core`);
the environment wins. Durations are in seconds. An unknown option is refused with the nearest
valid name (`unknown option 'groups.unbind_dealy' (did you mean 'unbind_delay'?)`). This page
is generated from the settings models (`python -m osrdyne.ops._config_doc >
docs/configuration.md`); a test checks it is current.

A minimal file:

```toml
pool = "core"

[amqp]
url = "amqp://guest:guest@127.0.0.1:5672/%2F"

[driver]
kind = "subprocess"

[driver.subprocess]
command = ["python", "-m", "worker_sdk.examples.echo"]
```

Workers read their own settings from the environment the driver gives them (`WORKER_*`);
see [worker SDK settings](#worker-sdk-settings).
"""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(section)"
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    # The subprocess default command names this machine's interpreter: keep the page portable.
    return f"`{json.dumps(value, default=str)}`".replace(json.dumps(sys.executable)[1:-1], "python")


def _type(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "").replace("|", "\\|")


def render_model(model: type[BaseModel], section: str) -> list[str]:
    lines = [f"## `{section}`" if section else "## Top level", ""]
    doc = (model.__doc__ or "").strip().splitlines()
    if doc:
        lines += [doc[0], ""]
    lines += ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        option = field.alias or name
        if field.exclude:
            continue
        sub = _model_of(field.annotation)
        if sub is not None:
            nested.append((f"{section}.{option}" if section else option, sub))
            continue
        description = (field.description or "").replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| `{option}` | {_type(field.annotation)} | {_default(field)} | {description} |"
        )
    lines.append("")
    if model is DriverSettings:  # each driver's section, from the registry
        nested += [(f"{section}.{name}", sub) for name, sub in registry.SECTIONS.items()]
    for sub_section, sub in nested:
        lines += render_model(sub, f"[{sub_section}]".strip("[]"))
    return lines


def render_dataclass(settings: type[Any]) -> list[str]:
    """The table of a settings dataclass whose fields carry a `doc` (the worker SDK's)."""
    hints = typing.get_type_hints(settings)
    lines = [(settings.__doc__ or "").strip().splitlines()[0], ""]
    lines += ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
    for field in dataclasses.fields(settings):
        if field.default is dataclasses.MISSING:
            default = "required"
        else:
            default = f"`{json.dumps(field.default)}`"
        description = field.metadata["doc"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{field.name}` | {_type(hints[field.name])} | {default} | {description} |")
    return [*lines, ""]


def render() -> str:
    from worker_sdk.settings import WorkerSettings

    lines = [HEADER]
    lines += render_model(Settings, "")
    lines += [
        "## Worker SDK settings",
        "",
        "Read by `worker_sdk.Worker` from `WORKER_<OPTION>` (upper case).",
        "",
    ]
    lines += render_dataclass(WorkerSettings)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
