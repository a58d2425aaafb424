"""The GPUs being paid for: what the infra layer sees, plus the static list of those it cannot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from monitor.config import StaticGpus
from monitor.infra.reading import GpuReading, GpuState, InfraView
from monitor.topology import GpuKey, SeenGpu

Pods = tuple[tuple[str, str], ...]
"""(namespace, pod) pairs of the workloads dcgm-exporter shows on a GPU"""


@dataclass(frozen=True)
class InventoryGpu:
    node: str
    gpu: str
    model: str  # as reported ("NVIDIA H100 80GB HBM3"); "" when the source does not say
    source: str  # "nvml", "replay", a dcgm target's name, or "static"
    up: bool | None  # None: a static GPU, which nothing reads
    utilization: float | None  # 0-1; None when down, static, or not reported
    pods: Pods = ()

    @property
    def key(self) -> GpuKey:
        return self.node, self.gpu

    def seen(self) -> SeenGpu:
        return SeenGpu(self.node, self.gpu, self.pods)


def build_inventory(
    view: InfraView, static: Sequence[StaticGpus], last_pods: Mapping[GpuKey, Pods]
) -> list[InventoryGpu]:
    """Every GPU once: a GPU the sources show wins over a static entry with the same node and index.

    A GPU that is down keeps the pods it last showed (`last_pods`), so its target keeps its GPUs.
    """
    gpus = [_from_state(state, last_pods) for state in view.gpus]
    taken = {g.key for g in gpus}
    next_index: dict[str, int] = {}
    for entry in static:
        first = next_index.get(entry.node, 0)
        next_index[entry.node] = first + entry.count
        for index in range(first, first + entry.count):
            if (entry.node, str(index)) not in taken:
                gpus.append(InventoryGpu(entry.node, str(index), entry.model, "static", None, None))
    return gpus


def _from_state(state: GpuState, last_pods: Mapping[GpuKey, Pods]) -> InventoryGpu:
    model = state.identity.model if state.identity is not None else ""
    reading = state.reading if state.up else None
    pods = _pods(reading) if reading is not None else last_pods.get((state.node, state.gpu), ())
    utilization = reading.utilization_ratio if reading is not None else None
    return InventoryGpu(state.node, state.gpu, model, state.source, state.up, utilization, pods)


def _pods(reading: GpuReading) -> Pods:
    found = {(w.get("namespace", ""), w["pod"]) for w in (reading.workload, *(m.workload for m in reading.mig))
             if w.get("pod")}
    return tuple(sorted(found))
