"""Configuration mistakes said in one line, with the nearest valid name for a misspelt one.

pydantic reports a settings mistake as a multi-line `ValidationError` naming internal types;
an operator who wrote `unbind_dealy = 5` needs `unknown option 'groups.unbind_dealy' (did you
mean 'unbind_delay'?)`. Every section model forbids unknown options, so a typo is refused
instead of silently ignored; this module turns each error into such a sentence.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

import pydantic

from drivers import registry


def _section_model(annotation: Any) -> type[pydantic.BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _section_model(arg)
            if found is not None:
                return found
    return None


def options_at(model: type[pydantic.BaseModel], path: Sequence[str | int]) -> list[str]:
    """The option names valid in the section at `path` of `model` (empty when unknown)."""
    current: type[pydantic.BaseModel] | None = model
    for part in path:
        if current is None:
            return []
        fields = {f.alias or n: f for n, f in current.model_fields.items()}
        if part in fields:
            current = _section_model(fields[str(part)].annotation)
        elif str(part) in registry.SECTIONS and "sections" in current.model_fields:
            current = registry.SECTIONS[str(part)]  # [driver.<section>]
        else:
            return []
    if current is None:
        return []
    names = [f.alias or n for n, f in current.model_fields.items() if not f.exclude]
    if "sections" in current.model_fields:
        names += list(registry.SECTIONS)
    return names


def explain(
    error: pydantic.ValidationError, model: type[pydantic.BaseModel], *, prefix: str = ""
) -> str:
    """Every error of `error` (validating `model`, found at `prefix` of the configuration)
    as one sentence, joined by "; "."""
    sentences = []
    for item in error.errors(include_url=False):
        path = [p for p in item["loc"] if p != "sections"]
        where = ".".join([prefix] * bool(prefix) + [str(p) for p in path]) or "configuration"
        if item["type"] == "extra_forbidden" and path:
            name = str(path[-1])
            hint = registry.nearest(name, options_at(model, path[:-1]))
            sentences.append(f"unknown option {where!r}{hint}")
            continue
        message = str(item["msg"]).removeprefix("Value error, ")
        # A nested section's own explanation already says where it is.
        placed = message.startswith((f"{where}.", f"unknown option '{where}.", "unknown driver"))
        sentences.append(message if placed else f"{where}: {message}")
    return "; ".join(sentences)
