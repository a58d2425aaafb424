from pathlib import Path

import pytest

from monitor.config import ConfigError, Duration, load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_and_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, """
service:
  scrape_interval: 15s
  windows: [30s, 1m, 5m]
  targets:
    - {name: vllm-a, url: "http://10.0.0.5:8000/metrics"}
storage:
  url: "sqlite:///./infermon.db"
""")
    settings = load_settings(path)
    assert settings.service.scrape_interval.seconds == 15
    assert [w.text for w in settings.service.windows] == ["30s", "1m", "5m"]
    assert [w.seconds for w in settings.service.windows] == [30, 60, 300]
    assert settings.service.targets[0].name == "vllm-a"
    assert settings.server.port == 9480


def test_env_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "service:\n  scrape_interval: 15s\n  targets: [{name: a, url: 'http://h/metrics'}]\n")
    monkeypatch.setenv("INFERMON_SERVICE__SCRAPE_INTERVAL", "2s")
    monkeypatch.setenv("INFERMON_SERVER__PORT", "9999")
    settings = load_settings(path)
    assert settings.service.scrape_interval.seconds == 2
    assert settings.server.port == 9999
    assert settings.service.targets[0].name == "a"  # the file's other keys survive


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("service:\n  scrape_interval: 5 parsecs\n", "service.scrape_interval"),
        ("service:\n  windows: []\n", "service.windows"),
        ("service:\n  targets: [{name: a, url: 'ftp://x'}]\n", "service.targets.0.url"),
        ("service:\n  targets: [{name: a}]\n", "service.targets.0.url"),
        ("service:\n  scrape_intervall: 5s\n", "service.scrape_intervall"),
        ("server:\n  port: 99999\n", "server.port"),
        ("service:\n  targets: [{name: a, url: 'http://x'}, {name: a, url: 'http://y'}]\n", "service.targets"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    assert f"{key}:" in str(info.value)


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(write(tmp_path, "service: [unclosed\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml")


def test_duration_text() -> None:
    assert Duration("500ms").seconds == 0.5
    assert Duration("1h").seconds == 3600
    assert Duration("30").text == "30s"
    with pytest.raises(ValueError):
        Duration("0s")
