"""Where sampled responses come from: one module per source, one small protocol."""

from __future__ import annotations

from typing import Protocol

from monitor.quality.sample import Sample


class SampleSource(Protocol):
    name: str

    async def samples(self, start: float, end: float) -> list[Sample]:
        """Every response whose timestamp is in [start, end) (unix seconds)."""
        ...
