"""Local GPUs: a `GpuBackend` driven off the event loop, one worker thread per GPU.

    open (once, retried until it works) -> one read per GPU per tick, each under the deadline

A GPU whose read times out, is still stuck from an earlier tick, or is lost reports up = 0
and no other series; the others and every other layer carry on. "Not present" (no NVML
library, no driver) is a state of the health entry, not a failure — unless the config says
NVML must be there (`infra.nvml.enabled: true`).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TypedDict

from monitor.health import HealthBook
from monitor.infra.reading import GpuBackend, GpuIdentity, GpuReading, GpuState, NotPresent
from monitor.infra.worker import DeviceWorker, Inbox, WorkerBusy

log = logging.getLogger("monitor.infra")
COLLECTOR = "infra"


class LocalStatus(TypedDict):
    """The local GPUs in /api/v1/status' "layers"."infra"."local"."""

    source: str  # nvml | replay
    present: bool
    absent_reason: str | None  # why there are none (no driver, no NVML): not an error
    gpus: int
    stuck_calls: dict[str, float]  # GPU index -> seconds its NVML call has been running


class LocalGpus:
    def __init__(
        self,
        backend: GpuBackend,
        node: str,
        health: HealthBook,
        timeout_s: float,
        source: str = "nvml",
        required: bool = False,
    ) -> None:
        self.backend = backend
        self.node = node
        self.health = health
        self.timeout_s = timeout_s
        self.source = source
        self.required = required
        self.identities: list[GpuIdentity] | None = None
        self.absent: str | None = None  # why NVML is not present, while it is not
        self.system = DeviceWorker(f"infermon-{source}")
        self.workers: dict[int, DeviceWorker] = {}

    async def collect(self) -> list[GpuState]:
        if self.identities is None:
            await self._open()
        if self.identities is None:
            return []
        # Start every GPU's read first, then collect them: they run side by side.
        started = [(identity, self._submit(identity)) for identity in self.identities]
        return [await self._finish(identity, job) for identity, job in started]

    async def _open(self) -> None:
        # The health entry (target = the source) exists while opening fails or NVML is absent.
        with self.health.run(COLLECTOR, self.source) as entry:
            try:
                identities = await self.system.call(self.backend.open, self.timeout_s)
            except NotPresent as exc:
                if self.required:
                    raise
                if self.absent is None:
                    log.info("no local GPUs: %s", exc)
                self.absent, entry.present = str(exc), False
                return
            self.absent = None
            inbox = Inbox()  # shared: GPUs finishing together wake the loop once
            self.workers = {i.index: DeviceWorker(f"infermon-{self.source}-gpu{i.index}", inbox=inbox)
                            for i in identities}
            self.identities = identities
            log.info("%s: %d GPU(s) on %s", self.source, len(identities), self.node)
        if self.identities is not None:
            self.health.forget(COLLECTOR, self.source)

    def _submit(self, identity: GpuIdentity) -> asyncio.Future[GpuReading] | WorkerBusy:
        try:
            return self.workers[identity.index].submit(partial(self.backend.read, identity.index), self.timeout_s)
        except WorkerBusy as exc:
            return exc

    async def _finish(self, identity: GpuIdentity, job: asyncio.Future[GpuReading] | WorkerBusy) -> GpuState:
        gpu = str(identity.index)
        reading: GpuReading | None = None
        with self.health.run(COLLECTOR, gpu) as entry:
            if isinstance(job, WorkerBusy):
                raise job
            reading = await job
        if not isinstance(job, WorkerBusy):
            # The GPU's own read time, not how long this loop waited behind the GPUs before it.
            entry.duration_seconds = self.workers[identity.index].last_duration
        if reading is None:
            return GpuState(self.node, gpu, self.source, up=False, identity=identity, error=entry.error)
        return GpuState(self.node, gpu, self.source, up=True, identity=identity, reading=reading)

    def status(self) -> LocalStatus:
        return {
            "source": self.source,
            "present": self.absent is None,
            "absent_reason": self.absent,
            "gpus": len(self.identities or []),
            "stuck_calls": {str(index): round(busy, 3) for index, worker in self.workers.items()
                            if (busy := worker.busy_for) is not None},
        }

    async def aclose(self) -> None:
        workers = [self.system, *self.workers.values()]
        if self.identities is not None and self.system.busy_for is None:
            try:
                await self.system.call(self.backend.close, self.timeout_s)
            except Exception as exc:  # shutting down: a wedged driver must not block the exit
                log.warning("%s: shutdown failed: %s", self.source, exc)
        for worker in workers:
            worker.close()
