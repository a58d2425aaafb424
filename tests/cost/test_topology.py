"""The target -> GPU map: said on the target (node, gpus) or found through dcgm-exporter's pod labels."""

from __future__ import annotations

from monitor.config import load_settings
from monitor.topology import SeenGpu, Topology

GPUS = [
    *(SeenGpu("gpu-node-01", str(i)) for i in range(8)),
    SeenGpu("gpu-node-02", "0", (("serving", "vllm-llama-7d9f8c6b5-x2kqp"),)),
    SeenGpu("gpu-node-02", "1", (("serving", "vllm-llama-7d9f8c6b5-x2kqp"),)),
    SeenGpu("gpu-node-02", "2", (("batch", "vllm-llama-0000000000-aaaaa"),)),
    SeenGpu("gpu-node-02", "3", (("serving", "sglang-qwen-6c5b4a3f2-k8pqz"),)),
]


def topology(*targets: dict[str, object], node: str = "gpu-node-01") -> Topology:
    rows = [{"url": f"http://{t['name']}/metrics", **t} for t in targets]
    return Topology(load_settings(None, {"service": {"targets": rows}}).service.targets, node)


def test_gpus_on_the_target_node_only_and_pod_mappings() -> None:
    mapped = topology(
        {"name": "vllm-a", "node": "gpu-node-01", "gpus": [0, 1, 2, 3]},
        {"name": "vllm-b", "gpus": [4, 5]},  # infra.node
        {"name": "llama", "pod": "vllm-llama-*", "namespace": "serving"},
        {"name": "whole", "node": "gpu-node-02"},
        {"name": "unmapped"},
    ).resolve(GPUS)
    assert mapped.gpus_of("vllm-a") == tuple(("gpu-node-01", str(i)) for i in range(4))
    assert mapped.gpus_of("vllm-b") == (("gpu-node-01", "4"), ("gpu-node-01", "5"))
    assert mapped.gpus_of("llama") == (("gpu-node-02", "0"), ("gpu-node-02", "1"))  # not the batch namespace
    assert mapped.gpus_of("whole") == tuple(("gpu-node-02", str(i)) for i in range(4))
    assert mapped.gpus_of("unmapped") == ()
    assert mapped.targets_of("gpu-node-02", "1") == ("llama", "whole")
    assert mapped.targets_of("gpu-node-01", "7") == ()
    assert mapped.how == {"vllm-a": "gpus", "vllm-b": "gpus", "llama": "pod", "whole": "node"}
    assert mapped.unseen == {}


def test_declared_gpus_no_source_shows_are_kept_and_reported() -> None:
    mapped = topology({"name": "far", "node": "rack-9", "gpus": [0, 1]}).resolve(GPUS)
    assert mapped.gpus_of("far") == (("rack-9", "0"), ("rack-9", "1"))
    assert mapped.unseen == {"far": (("rack-9", "0"), ("rack-9", "1"))}
    shown = mapped.as_dict()
    assert shown["targets"] == {"far": {"mapped_by": "gpus", "gpus": [{"node": "rack-9", "gpu": "0"},
                                                                       {"node": "rack-9", "gpu": "1"}],
                                        "unseen": [{"node": "rack-9", "gpu": "0"}, {"node": "rack-9", "gpu": "1"}]}}


def test_pod_glob_restricted_to_a_node_and_gpus() -> None:
    mapped = topology({"name": "t", "pod": "*", "node": "gpu-node-02", "gpus": [2, 3]}).resolve(GPUS)
    assert mapped.gpus_of("t") == (("gpu-node-02", "2"), ("gpu-node-02", "3"))


def test_one_node_holding_every_gpu_maps_every_target_that_says_nothing() -> None:
    box = [SeenGpu("box", str(i)) for i in range(8)]
    mapped = topology({"name": "vllm"}, {"name": "sglang"}).resolve(box)
    assert mapped.gpus_of("vllm") == mapped.gpus_of("sglang") == tuple(("box", str(i)) for i in range(8))
    assert mapped.how == {"vllm": "single node", "sglang": "single node"}
    assert mapped.targets_of("box", "3") == ("vllm", "sglang")
    assert mapped.unmapped(["vllm", "sglang"]) == []


def test_no_default_mapping_over_two_nodes_or_beside_a_declared_one() -> None:
    two_nodes = topology({"name": "vllm"}).resolve([SeenGpu("a", "0"), SeenGpu("b", "0")])
    assert two_nodes.by_target == {} and two_nodes.unmapped(["vllm"]) == ["vllm"]
    box = [SeenGpu("box", str(i)) for i in range(4)]
    beside = topology({"name": "vllm", "node": "box", "gpus": [0]}, {"name": "other"}, node="box").resolve(box)
    assert beside.gpus_of("other") == () and beside.unmapped(["vllm", "other"]) == ["other"]
