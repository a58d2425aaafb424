"""docs/configuration.md: every key of the settings model (`monitor/config.py`), from its fields.

    python -m monitor.reference.configuration > docs/configuration.md

A key is written as its dotted path; `[]` stands for the items of a list (`service.targets[].url`),
`<name>` for the keys of a mapping (`cost.gpu_prices.<name>.usd_per_hour`), and `[type=x]` for one kind
of a list of kinds (`quality.sources[type=jsonl].paths`). The environment variable sets the key, or,
under a list or a mapping, the whole list or mapping as JSON.
"""

from __future__ import annotations

import json
import socket
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from monitor.config import Duration, Settings
from monitor.reference.metrics import cell
from monitor.settings_keys import ENV_PREFIX

# Defaults that depend on the machine the page is generated on: written as what they are.
_DYNAMIC_DEFAULTS: dict[Callable[[], Any], str] = {socket.gethostname: "this machine's host name"}
_SCALARS = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path", Duration: "duration",
            SecretStr: "secret", type(None): "none"}


@dataclass(frozen=True)
class Key:
    path: str
    type: str
    default: str
    env: str
    description: str


def type_name(annotation: Any) -> str:
    """`duration`, `list of duration`, `one of auto, true, false`, `text (optional)`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        named = " or ".join(dict.fromkeys(type_name(a) for a in present))
        return f"{named} (optional)" if len(present) < len(args) else named
    if origin is list:
        item = type_name(args[0])
        return "list of sections" if item == "section" else f"list of {item}"
    if origin is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(str(m.value) for m in annotation)
    return _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or any(_is_secret(a) for a in typing.get_args(annotation))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return {k: _plain(v) for k, v in value.model_dump(mode="json").items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Duration | Path):
        return str(value)
    return value


def default_text(field: FieldInfo) -> str:
    """The default as a reader writes it; a secret's default never (when it has one that is not empty)."""
    if field.default_factory is not None:
        if field.default_factory in _DYNAMIC_DEFAULTS:
            return _DYNAMIC_DEFAULTS[field.default_factory]
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if _is_secret(field.annotation) and value not in (None, ""):
        return "(secret, not shown)"
    if value is None:
        return "(unset)"
    if isinstance(value, BaseModel):
        return "(below)"
    shown = _plain(value)
    if isinstance(shown, bool):
        return f"`{str(shown).lower()}`"
    if shown in ([], {}, ""):
        return "(empty)"
    items = shown if isinstance(shown, list) else [shown]
    return ", ".join(f"`{json.dumps(item) if isinstance(item, dict) else item}`" for item in items)


def _sections(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _sections(arg)]


def _kind(model: type[BaseModel]) -> str | None:
    """The `type` literal of one kind in a list of kinds (quality.sources)."""
    field = model.model_fields.get("type")
    choices = typing.get_args(field.annotation) if field is not None else ()
    if field is not None and typing.get_origin(field.annotation) is Literal and len(choices) == 1:
        return str(choices[0])
    return None


def keys(model: type[BaseModel], path: str, env: str | None) -> Iterator[Key]:
    """Every key under the section `model` at `path` (set as a whole by the variable `env`, None inside a
    list or a mapping), depth first in declaration order; a section's own row comes before its keys."""
    for name, field in model.model_fields.items():
        dotted = f"{path}.{name}"
        variable = f"{env}__{name.upper()}" if env else None
        sections = _sections(field.annotation)
        description = field.description or (sections[0].__doc__ or "" if len(sections) == 1 else "")
        json = " (JSON)" if sections else ""
        where = f"`{variable}`{json}" if variable else "(in the list's or mapping's variable)"
        yield Key(dotted, type_name(field.annotation), default_text(field), where, " ".join(description.split()))
        if not sections:
            continue
        inner = _inner_path(field.annotation, dotted)
        below = None if inner != dotted else variable  # items of a list or mapping: the whole is one variable
        for section in sections:
            kind = _kind(section) if len(sections) > 1 else None
            yield from keys(section, f"{inner.removesuffix('[]')}[type={kind}]" if kind else inner, below)


def sections() -> Iterator[tuple[str, type[BaseModel], list[Key]]]:
    """Each top-level section of the settings: its name, its model and its keys."""
    for name, field in Settings.model_fields.items():
        section = _sections(field.annotation)[0]
        yield name, section, list(keys(section, name, f"{ENV_PREFIX}{name.upper()}"))


def _inner_path(annotation: Any, dotted: str) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return f"{dotted}[]"
    if origin is dict:
        return f"{dotted}.<name>"
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in args:
            inner = _inner_path(arg, dotted)
            if inner != dotted:
                return inner
    return dotted


def markdown() -> str:
    lines = ["# Configuration", "",
             "Generated from `monitor/config.py`",
             "(`python -m monitor.reference.configuration > docs/configuration.md`); a test keeps the two equal.",
             "One YAML file (`infermon serve --config PATH`; `infermon check --config PATH` checks it and says",
             "which key is wrong), every key overridable by an environment variable",
             "`INFERMON_<SECTION>__<KEY>` (the environment wins over the file). A list or a mapping in the",
             "environment is JSON: `INFERMON_SERVICE__WINDOWS='[\"1m\", \"5m\"]'`. Durations are text: `500ms`,",
             "`15s`, `1m`, `1h`, `1d`. Secrets (`api.token`, receivers' `url`/`secret`/`token`) can come from a",
             "file or a variable (`url_file`, `url_env`, ...) and are never echoed back by the API or the logs.", "",
             "`[]` stands for the items of a list, `<name>` for the keys of a mapping, `[type=x]` for one kind in",
             "a list of kinds.", ""]
    for name, section, rows in sections():
        lines += [f"## {name}", ""]
        if section.__doc__ and section.__doc__ is not BaseModel.__doc__:
            lines += [" ".join(section.__doc__.split()), ""]
        lines += ["| key | type | default | environment | description |",
                  "|-----|------|---------|-------------|-------------|"]
        lines += [f"| `{k.path}` | {cell(k.type)} | {cell(k.default)} | {k.env} | {cell(k.description)} |"
                  for k in rows]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
