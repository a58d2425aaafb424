"""A GPU whose engines sleep is idle by design: inference_gpu_serving_asleep says so per GPU, from
the sleep states on the engine's own page (vLLM 0.33's engine_sleep_state) and the GPU map."""

from __future__ import annotations

from monitor.cost.collector import serving_asleep
from monitor.service.derive import Objectives
from monitor.service.view import ServiceView, TargetView
from monitor.topology import TopologyMap

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _target(name: str, states: dict[str, float] | None, up: bool = True) -> TargetView:
    view = TargetView(name, up, "vllm", "v1")
    if states is not None:
        view.labelled["sleep_state"] = {MODEL: states}
    return view


def test_a_gpu_is_asleep_only_when_everything_it_serves_sleeps() -> None:
    targets = {
        "asleep": _target("asleep", {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 1.0}),  # both ranks
        "half": _target("half", {"awake": 1.0, "weights_offloaded": 1.0, "discard_all": 0.0}),
        "old": _target("old", None),  # an engine without sleep states (vLLM < 0.33, SGLang): never asleep
        "down": _target("down", None, up=False),
    }
    service = ServiceView(ts=0.0, windows=[], objectives=Objectives(), targets=targets)
    topology = TopologyMap(by_gpu={("n1", "0"): ("asleep",), ("n1", "1"): ("half",), ("n1", "2"): ("old",),
                                   ("n1", "3"): ("asleep", "half"), ("n1", "4"): ("down",), ("n1", "5"): ()})
    assert serving_asleep(topology, service) == {("n1", "0"): 1.0, ("n1", "1"): 0.0, ("n1", "2"): 0.0,
                                                 ("n1", "3"): 0.0, ("n1", "4"): 0.0}
