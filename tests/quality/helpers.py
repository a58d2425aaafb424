"""Settings and samples for quality tests: a real SQLite file, the scripted judge on loopback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from monitor.config import Settings, load_settings
from monitor.quality.sample import Sample

DAY = "2026-11-29"
DAY_START = datetime(2026, 11, 29, tzinfo=UTC).timestamp()


def quality_settings(tmp_path: Path, judge_url: str, url: str | None = None, **quality: Any) -> Settings:
    section: dict[str, Any] = {
        "timezone": "UTC", "sample_size": 20, "baseline_days": 7,
        "judge": {"base_url": judge_url, "model": "judge-test", "concurrency": 4, "timeout": "5s",
                  "max_retries": 1},
    }
    section.update(quality)
    # The tests of one behaviour count judge calls: the known answers (calibration.py) are judged in
    # the tests that are about them. Prices as a hosted judge's, so the cost is a number to check.
    judge = section["judge"] = dict(section["judge"])
    judge.setdefault("calibration", "off")
    judge.setdefault("usd_per_million_input_tokens", 1.25)
    judge.setdefault("usd_per_million_output_tokens", 10.0)
    return load_settings(None, {
        "storage": {"url": url or f"sqlite:///{tmp_path / 'quality.db'}"},
        "infra": {"nvml": {"enabled": "false"}},
        "quality": section,
    })


def make_samples(count: int, model: str = "qwen3-8b", day_start: float = DAY_START, words: int = 60,
                 prefix: str = "s") -> list[Sample]:
    return [
        Sample(model=model, prompt=f"Question {prefix}{i}: explain topic {i}.",
               response=" ".join(f"word{i}x{k}" for k in range(words + i % 7)),
               timestamp=day_start + 60.0 * i, request_id=f"{prefix}-{model}-{i}", output_tokens=words + i % 7)
        for i in range(count)
    ]


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def days_before(n: int) -> float:
    return (datetime(2026, 11, 29, tzinfo=UTC) - timedelta(days=n)).timestamp()
