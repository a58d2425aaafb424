"""JSONL files as a source: the request-log shape, bad lines skipped and counted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from monitor.quality.sampling import day_window
from monitor.quality.sources.jsonl import JsonlSource
from tests.quality.helpers import DAY, DAY_START, iso


def test_reads_the_day_and_skips_bad_lines(tmp_path: Path) -> None:
    lines = [
        {"model": "m", "prompt": "p1", "response": "r1", "timestamp": iso(DAY_START + 10), "output_tokens": 3},
        {"model": "m", "prompt": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "response": "r2",
         "context": ["a", "b"], "timestamp": "2026-11-29T08:00:00+08:00"},
        {"model": "m", "prompt": "next day", "response": "r", "timestamp": iso(DAY_START + 86400)},
        {"model": "m", "prompt": "no time", "response": "r"},
    ]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n{broken\n\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"model": "m", "response": "no prompt"}) + "\n")
    source = JsonlSource([tmp_path / "*.jsonl"])
    samples = asyncio.run(source.samples(*day_window(DAY, "UTC")))
    assert [s.prompt for s in samples] == ["p1", "user: hi"]
    assert samples[0].output_tokens == 3 and samples[1].context == "a\n\nb"
    assert samples[1].timestamp == DAY_START  # 08:00 in UTC+8 is midnight UTC
    assert source.bad_lines == 2
