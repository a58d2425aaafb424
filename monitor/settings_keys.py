"""A settings model as a tree of keys: what a dotted key names, what a misspelt one meant, and which
environment variable set a value.

    fields_at(Settings, ("service", "targets", 0))   -> the keys of a service target (name, url, node, ...)
    suggest(Settings, ("service", "scrape_intervall")) -> "scrape_interval"
    env_var_for(("service", "scrape_interval"), environ) -> "INFERMON_SERVICE__SCRAPE_INTERVAL" when set
    setting_exists(Settings, "infra.dcgm.targets")    -> True; "infra.dcgm_targets" -> False

The model is an argument, not an import: `monitor/config.py` describes its own errors with these.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

ENV_PREFIX = "INFERMON_"
Loc = Sequence[str | int]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The settings sections an annotation holds: X, list[X], dict[str, X], X | None, a union of sources."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _is_container(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (list, dict, tuple):
        return True
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return any(_is_container(arg) for arg in typing.get_args(annotation))
    return False


def fields_at(root: type[BaseModel], loc: Loc) -> set[str] | None:
    """The keys allowed under `loc` (a path of keys and list indexes) of `root`; None when loc names
    no section."""
    models: list[type[BaseModel]] = [root]
    pending_container = False
    for part in loc:
        if isinstance(part, int) or (pending_container and not any(part in m.model_fields for m in models)):
            pending_container = False  # a list index or a dict key (a price per GPU model): same models
            continue
        next_models: list[type[BaseModel]] = []
        container = False
        for model in models:
            field = model.model_fields.get(part)
            if field is not None:
                next_models += _models_in(field.annotation)
                container = container or _is_container(field.annotation)
        if not next_models:
            return None
        models, pending_container = next_models, container
    return {name for model in models for name in model.model_fields}


def suggest(root: type[BaseModel], loc: Loc) -> str | None:
    """The allowed key nearest to a misspelt last key of `loc`, if one is near enough."""
    if not loc or not isinstance(loc[-1], str):
        return None
    allowed = fields_at(root, loc[:-1])
    if not allowed:
        return None
    close = difflib.get_close_matches(loc[-1], sorted(allowed), n=1, cutoff=0.6)
    return close[0] if close else None


def setting_exists(root: type[BaseModel], dotted: str) -> bool:
    """Whether `a.b.c` names a key of `root` (a list's items count as the list)."""
    parts = dotted.split(".")
    allowed = fields_at(root, parts[:-1])
    return allowed is not None and parts[-1] in allowed


def env_var_for(loc: Loc, environ: Mapping[str, str]) -> str | None:
    """The INFERMON_ variable that set the value at `loc` (or a section above it), if one is set."""
    names = {name.upper(): name for name in environ}
    keys = [str(part) for part in loc]
    for depth in range(len(keys), 0, -1):
        name = ENV_PREFIX + "__".join(keys[:depth]).upper()
        if name in names:
            return names[name]
    return None


def env_vars_under(section: str, environ: Mapping[str, str]) -> list[str]:
    """The INFERMON_ variables that set `section` or a key beneath it (INFERMON_SERVICE__WINDOWS)."""
    name = ENV_PREFIX + section.upper()
    return sorted(v for v in environ if v.upper() == name or v.upper().startswith(name + "__"))
