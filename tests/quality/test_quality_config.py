"""The quality section: the issue's example loads; a bad value names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import ConfigError, load_settings

EXAMPLE = """
quality:
  schedule: "0 2 * * *"
  timezone: Asia/Shanghai
  sample_size: 100
  baseline_days: 7
  sources: [{type: requestlog}]
  judge:
    base_url: "https://api.openai.com/v1"
    model: gpt-5
    api_key_env: OPENAI_API_KEY
    concurrency: 8
    usd_per_million_input_tokens: 1.25
    usd_per_million_output_tokens: 10.0
  redact: [email, phone, id_number, api_key]
"""


def test_the_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(EXAMPLE)
    quality = load_settings(path).quality
    assert quality.timezone == "Asia/Shanghai" and quality.judge.model == "gpt-5"
    assert [s.type for s in quality.sources] == ["requestlog"]


@pytest.mark.parametrize(("section", "key"), [
    ({"timezone": "Mars/Olympus"}, "quality.timezone"),
    ({"schedule": "at two"}, "quality.schedule"),
    ({"sources": [{"type": "kafka"}]}, "quality.sources.0"),
    ({"sources": [{"type": "jsonl"}]}, "quality.sources.0.jsonl.paths"),
    ({"judge": {"concurrency": 0}}, "quality.judge.concurrency"),
    ({"judge": {"temperature": 1}}, "quality.judge.temperature"),
])
def test_bad_values_name_the_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(None, {"quality": section})
    assert key in str(error.value)


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_QUALITY__SAMPLE_SIZE", "25")
    monkeypatch.setenv("INFERMON_QUALITY__JUDGE__MODEL", "qwen3-judge")
    quality = load_settings().quality
    assert quality.sample_size == 25 and quality.judge.model == "qwen3-judge"
