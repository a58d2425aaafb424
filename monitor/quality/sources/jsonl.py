"""JSONL files of request-log objects; a bad line is skipped and counted, never fatal."""

from __future__ import annotations

import glob
import json
import logging
from pathlib import Path

from pydantic import ValidationError

from monitor.quality.sample import Sample, SampleIn

log = logging.getLogger("monitor.quality.jsonl")


class JsonlSource:
    name = "jsonl"

    def __init__(self, paths: list[Path], max_chars: int | None = None) -> None:
        self.paths = paths
        self.max_chars = max_chars
        self.bad_lines = 0

    def files(self) -> list[Path]:
        found: list[Path] = []
        for pattern in self.paths:
            matches = sorted(glob.glob(str(pattern)))
            found.extend(Path(m) for m in matches)
        return found

    async def samples(self, start: float, end: float) -> list[Sample]:
        out: list[Sample] = []
        for path in self.files():
            with path.open(encoding="utf-8") as lines:
                for number, line in enumerate(lines, 1):
                    if not line.strip():
                        continue
                    sample = self._parse(path, number, line)
                    if sample is not None and start <= sample.timestamp < end:
                        out.append(sample)
        return out

    def _parse(self, path: Path, number: int, line: str) -> Sample | None:
        try:
            # Without a timestamp a line would land on whatever day is read: it has none.
            return SampleIn.model_validate(json.loads(line)).to_sample(now=-1.0, source="jsonl",
                                                                        max_chars=self.max_chars)
        except (ValueError, ValidationError) as exc:
            self.bad_lines += 1
            log.warning("%s:%d: skipped: %s", path, number, str(exc).splitlines()[0][:200])
            return None
