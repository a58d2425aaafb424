"""Which GPUs serve which service target: the one join between the service layer and the GPUs.

A target says it on itself (`service.targets[].node` / `gpus`), or names the Kubernetes pod
whose GPUs dcgm-exporter labels (`pod`, a name or a glob, and optionally `namespace`):

    {name: vllm-a, url: ..., node: gpu-node-01, gpus: [0, 1, 2, 3]}   # those four GPUs
    {name: vllm-b, url: ..., node: gpu-node-02}                        # every GPU of the node
    {name: vllm-c, url: ..., gpus: [0]}                                # GPU 0 of infra.node
    {name: vllm-d, url: ..., pod: "vllm-llama-*", namespace: serving}  # the pod's GPUs

When no target says and every GPU the sources show is on one node (one box serving), every
target is mapped to that node's GPUs (`mapped_by: single node`): the common case needs no mapping.

The map is resolved against the GPUs the sources show (a pod moves, a node joins), so it is
recomputed from each inventory; cost uses it for spend per target and model, alert context to
say which target a GPU alert touches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from monitor.config import ServiceTarget

GpuKey = tuple[str, str]
"""(node, gpu index as its label value)"""


@dataclass(frozen=True)
class SeenGpu:
    """A GPU some source shows, with the pods dcgm-exporter says use it ((namespace, pod) pairs)."""

    node: str
    gpu: str
    pods: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TopologyMap:
    by_target: dict[str, tuple[GpuKey, ...]] = field(default_factory=dict)
    by_gpu: dict[GpuKey, tuple[str, ...]] = field(default_factory=dict)
    unseen: dict[str, tuple[GpuKey, ...]] = field(default_factory=dict)  # declared, shown by no source
    how: dict[str, str] = field(default_factory=dict)  # target -> "gpus" | "node" | "pod"

    def gpus_of(self, target: str) -> tuple[GpuKey, ...]:
        """The GPUs serving `target` (empty when the target does not say)."""
        return self.by_target.get(target, ())

    def targets_of(self, node: str, gpu: str) -> tuple[str, ...]:
        """The targets a GPU serves (empty for an unassigned GPU)."""
        return self.by_gpu.get((node, gpu), ())

    def unmapped(self, targets: Iterable[str]) -> list[str]:
        """Of `targets`, those without a GPU: no spend per target, no $/token per model for them."""
        return [t for t in targets if not self.by_target.get(t)]

    def as_dict(self) -> dict[str, object]:
        return {
            "targets": {
                name: {"mapped_by": self.how.get(name), "gpus": [{"node": n, "gpu": g} for n, g in gpus],
                       "unseen": [{"node": n, "gpu": g} for n, g in self.unseen.get(name, ())]}
                for name, gpus in self.by_target.items()
            },
            "gpus": [{"node": n, "gpu": g, "targets": list(targets)} for (n, g), targets in self.by_gpu.items()],
        }


SINGLE_NODE = "single node"


class Topology:
    def __init__(self, targets: Sequence[ServiceTarget], default_node: str) -> None:
        self.targets = [t for t in targets if t.node is not None or t.gpus is not None or t.pod is not None]
        self.all_targets = list(targets)
        self.default_node = default_node

    def resolve(self, seen: Iterable[SeenGpu]) -> TopologyMap:
        gpus = list(seen)
        known = {(g.node, g.gpu) for g in gpus}
        result = TopologyMap()
        if not self.targets and len({g.node for g in gpus}) == 1:  # one box: its targets share its GPUs
            keys = tuple((g.node, g.gpu) for g in gpus)
            names = tuple(t.name for t in self.all_targets)
            result.by_target.update({name: keys for name in names})
            result.how.update({name: SINGLE_NODE for name in names})
            result.by_gpu.update({key: names for key in keys if names})
            return result
        for target in self.targets:
            mapped, how = self._gpus_of(target, gpus)
            result.by_target[target.name] = mapped
            result.how[target.name] = how
            missing = tuple(key for key in mapped if key not in known)
            if missing:
                result.unseen[target.name] = missing
            for key in mapped:
                result.by_gpu[key] = (*result.by_gpu.get(key, ()), target.name)
        return result

    def _gpus_of(self, target: ServiceTarget, gpus: list[SeenGpu]) -> tuple[tuple[GpuKey, ...], str]:
        if target.pod is not None:
            return tuple((g.node, g.gpu) for g in gpus if _pod_matches(target, g)), "pod"
        node = target.node or self.default_node
        if target.gpus is not None:
            return tuple((node, str(index)) for index in target.gpus), "gpus"
        return tuple((g.node, g.gpu) for g in gpus if g.node == node), "node"


def _pod_matches(target: ServiceTarget, gpu: SeenGpu) -> bool:
    if target.node is not None and gpu.node != target.node:
        return False
    if target.gpus is not None and gpu.gpu not in {str(i) for i in target.gpus}:
        return False
    assert target.pod is not None
    return any(fnmatchcase(pod, target.pod) and target.namespace in (None, namespace) for namespace, pod in gpu.pods)
