"""The request log: samples posted to POST /api/v1/samples, read back from the store."""

from __future__ import annotations

from monitor.quality.sample import Sample
from monitor.quality.store import QualityStore


class RequestLogSource:
    name = "requestlog"

    def __init__(self, store: QualityStore) -> None:
        self.store = store

    async def samples(self, start: float, end: float) -> list[Sample]:
        return self.store.samples_between(start, end)
