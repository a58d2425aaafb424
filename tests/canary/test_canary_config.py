"""The `canary:` section: defaults, and each mistake fails at start-up naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from monitor.config import ConfigError, load_settings

BASE = {"name": "p", "base_url": "http://10.0.0.5:8000/v1/", "model": "m"}


def canary(*probes: dict[str, Any], **section: Any) -> dict[str, Any]:
    return {"canary": {"probes": list(probes), **section}}


def test_defaults() -> None:
    probe = load_settings(None, canary(BASE)).canary.probes[0]
    assert probe.base_url == "http://10.0.0.5:8000/v1"  # the SDK adds /chat/completions
    assert (probe.interval.seconds, probe.timeout.seconds, probe.max_tokens) == (60.0, 30.0, 32)
    assert probe.api_key_env is None and probe.expect is None and probe.target is None
    assert probe.nonce is True
    settings = load_settings(None, canary())
    assert settings.canary.probes == [] and settings.canary.user == "infermon-canary"


@pytest.mark.parametrize(("interval", "timeout"), [("5s", 5.0), ("30s", 30.0), ("2m", 30.0), ("500ms", 0.5)])
def test_default_timeout_follows_the_interval(interval: str, timeout: float) -> None:
    probe = load_settings(None, canary({**BASE, "interval": interval})).canary.probes[0]
    assert probe.timeout.seconds == timeout  # min(30s, interval): `interval: 5s` alone is accepted


def test_an_explicit_timeout_still_must_fit() -> None:
    probe = load_settings(None, canary({**BASE, "interval": "5s", "timeout": "2s"})).canary.probes[0]
    assert probe.timeout.seconds == 2
    with pytest.raises(ConfigError, match="timeout 10s is longer than interval 5s"):
        load_settings(None, canary({**BASE, "interval": "5s", "timeout": "10s"}))


def test_a_bad_interval_is_named_not_hidden_by_the_default() -> None:
    with pytest.raises(ConfigError, match=r"canary\.probes\.0\.interval: not a duration"):
        load_settings(None, canary({**BASE, "interval": "soon"}))


@pytest.mark.parametrize(("section", "message"), [
    (canary({**BASE, "timeout": "2m"}), "canary.probes.0: timeout 2m is longer than interval 60s"),
    (canary({**BASE, "expect": "(unclosed"}), "canary.probes.0.expect: not a regular expression"),
    (canary({**BASE, "base_url": "10.0.0.5:8000"}), "canary.probes.0.base_url: not an http(s) URL"),
    (canary({**BASE, "api_key_env": "INFERMON_TEST_UNSET_KEY"}),
     "canary.probes.0.api_key_env: environment variable INFERMON_TEST_UNSET_KEY is not set"),
    (canary({**BASE, "max_tokens": 0}), "canary.probes.0.max_tokens"),
    (canary({**BASE, "colour": "red"}), "canary.probes.0.colour: unknown key"),
    (canary(BASE, {**BASE, "model": "n"}), "canary.probes: duplicate probe names: ['p']"),
    (canary({**BASE, "target": "nope"}), "canary.probes.0.target: no service target named 'nope'"),
    (canary(BASE, gap_window="3m"), "canary.gap_window: 3m is not one of service.windows ['1m', '5m']"),
])
def test_mistakes_name_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        load_settings(None, section)
    assert message in str(caught.value)


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_CANARY__USER", "ops-canary")
    assert load_settings(None, canary(BASE)).canary.user == "ops-canary"
