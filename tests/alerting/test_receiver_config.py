"""Receiver settings: secrets from files or environment variables, Alertmanager's send_resolved
defaults per type, errors that name the key and never the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import ConfigError, load_settings


def _receivers(*receivers: dict[str, object]) -> dict[str, dict[str, object]]:
    return {"alerting": {"receivers": list(receivers)}}


def test_secrets_from_files_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "url").write_text("https://oapi.dingtalk.com/robot/send?access_token=abc123\n")
    monkeypatch.setenv("DING_SECRET", "SECxyz789")
    settings = load_settings(None, _receivers(
        {"name": "ding", "type": "dingtalk", "url_file": str(tmp_path / "url"), "secret_env": "DING_SECRET"}))
    ding = settings.alerting.receivers[0]
    assert ding.url.get_secret_value() == "https://oapi.dingtalk.com/robot/send?access_token=abc123"
    assert ding.secret is not None and ding.secret.get_secret_value() == "SECxyz789"
    dumped = repr(settings) + settings.model_dump_json()
    assert "abc123" not in dumped and "SECxyz789" not in dumped


def test_unreadable_secret_file_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"alerting.receivers.0: .*url_file: cannot read"):
        load_settings(None, _receivers({"name": "x", "type": "webhook", "url_file": str(tmp_path / "missing")}))
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match="secret_env: environment variable NOT_SET_ANYWHERE is not set"):
        feishu = {"name": "x", "type": "feishu", "url": "https://f", "secret_env": "NOT_SET_ANYWHERE"}
        load_settings(None, _receivers(feishu))


def test_send_resolved_defaults_follow_alertmanager() -> None:
    kinds = ["webhook", "slack", "feishu", "dingtalk", "wecom"]
    settings = load_settings(None, _receivers(*({"name": k, "type": k, "url": "https://x"} for k in kinds)))
    assert {r.type: r.send_resolved for r in settings.alerting.receivers} == {
        "webhook": True, "slack": False, "feishu": True, "dingtalk": True, "wecom": False}
    slack = {"name": "s", "type": "slack", "url": "https://x", "send_resolved": True}
    explicit = load_settings(None, _receivers(slack))
    assert explicit.alerting.receivers[0].send_resolved


def test_unknown_receiver_key_fails() -> None:
    with pytest.raises(ConfigError, match=r"alerting\.receivers\.0\.colour: unknown key"):
        load_settings(None, _receivers({"name": "x", "type": "webhook", "url": "https://x", "colour": "red"}))
