"""The settings' cross-checks that need a layer's knowledge, run where the settings are assembled for use.

`monitor/config.py` checks what a value says by itself (a duration, a URL, a regular expression
that compiles) and imports no layer; whether a pinned engine, a clock-event reason or a built-in
redaction pattern exists only the layer that has it knows (the engine tables, NVML's reasons, the
quality layer's patterns). `load_checked_settings` is what `infermon` and the runtime load with,
so a broken value still fails at start-up, naming its key:

    config.yml: service.targets.0.engine: unknown engine: one of vllm, sglang, tgi
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from monitor.catalog import CATALOG
from monitor.config import ConfigError, Settings, describe_problems, load_settings
from monitor.infra.reading import CLOCK_EVENT_REASONS
from monitor.infra.replay import load_trace
from monitor.quality.calibration import GoldSetError, gold_set
from monitor.quality.redact import BUILTIN_PATTERNS
from monitor.rulefiles.promql import OutsideSubset, TooDeep, parse
from monitor.service.engines import unknown_engine
from monitor.settings_keys import Loc

Problem = tuple[Loc, str]


def load_checked_settings(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Settings from a YAML file (optional) and the environment, cross-checked; ConfigError names the key."""
    settings = load_settings(path, overrides)
    check_settings(settings, path)
    return settings


def check_settings(settings: Settings, path: str | Path | None = None) -> None:
    """ConfigError naming every setting that names what no layer has (where it was set, key, reason)."""
    problems = [*_unknown_engines(settings), *_unknown_reasons(settings), *_unknown_patterns(settings),
                *_bad_gold_set(settings), *_replay_trace(settings),
                *_history_series(settings)]
    if problems:
        raise ConfigError(describe_problems(problems, path))


def _unknown_engines(settings: Settings) -> Iterator[Problem]:
    pinned: list[tuple[Loc, str | None]] = [(("service", "targets", i, "engine"), t.engine)
                                            for i, t in enumerate(settings.service.targets)]
    pinned += [(("infra", "dcgm", "targets", i, "engine"), t.engine) for i, t in enumerate(settings.infra.dcgm.targets)]
    for loc, engine in pinned:
        if (reason := unknown_engine(engine)) is not None:  # the engine tables, not a copy of their names
            yield loc, reason


def _unknown_reasons(settings: Settings) -> Iterator[Problem]:
    unknown = sorted(set(settings.alerting.causes.throttle_reasons) - set(CLOCK_EVENT_REASONS))
    if unknown:
        yield (("alerting", "causes", "throttle_reasons"),
               f"unknown clock-event reasons {unknown} (known: {sorted(CLOCK_EVENT_REASONS)})")


def _bad_gold_set(settings: Settings) -> Iterator[Problem]:
    """The judge's known answers (quality/calibration.py) load, or the key says why not."""
    if settings.quality.judge.calibration is None:
        return  # the shipped set, checked by its own test
    try:
        gold_set(settings.quality.judge)
    except GoldSetError as exc:
        yield ("quality", "judge", "calibration"), str(exc)


def _replay_trace(settings: Settings) -> Iterator[Problem]:
    """A recorded trace to replay (infra.replay.file) loads, or the key says why not: `check` says so
    in a line, as `serve` does, not after printing the configuration OK."""
    if settings.infra.replay.file is None:
        return
    try:
        load_trace(settings.infra.replay.file)
    except ConfigError as exc:
        yield ("infra", "replay", "file"), str(exc).removeprefix("infra.replay.file: ")


def _unknown_patterns(settings: Settings) -> Iterator[Problem]:
    unknown = [v for v in settings.quality.redact if isinstance(v, str) and v not in BUILTIN_PATTERNS]
    if unknown:
        yield (("quality", "redact"),
               f"unknown patterns {unknown} (known: {sorted(BUILTIN_PATTERNS)}, or {{name, pattern}})")


def _history_series(settings: Settings) -> Iterator[Problem]:
    """Each `history.series` entry is a selector of one of the monitor's own series (what it exports)."""
    for index, text in enumerate(settings.history.series):
        try:
            node = parse(text).selector
        except (OutsideSubset, TooDeep) as exc:
            yield ("history", "series", index), f"not a selector: {exc}"
            continue
        if node is None:
            yield ("history", "series", index), 'one selector (e.g. inference_tpot_seconds{quantile="0.99"})'
        elif node.name not in CATALOG:
            yield ("history", "series", index), f"{node.name} is not a series the monitor exports (monitor/catalog.py)"
