"""Each alert's cause comes from its own layer's facts, as they hold now: a quality alert from the
quality run, a cost alert from the cost numbers, a GPU alert from that GPU and the targets on it.
Two alerts on one model at one instant agree unless their facts differ. docs/causes.md is the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monitor.alerting.causes import CAUSES, markdown
from monitor.alerting.context import Views
from monitor.alerting.explain import explain
from monitor.config import CauseSettings
from monitor.cost.collector import CostView
from monitor.cost.derive import CostNumbers, GpuCost
from monitor.cost.inventory import InventoryGpu
from monitor.quality.layer import ModelResult, QualityView
from monitor.quality.summary import QualitySummary
from tests.alerting.contextviews import MODEL, NODE, gpu, target, views

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = CauseSettings()
HEALTHY_RUN = {"samples": 95, "sampled": 100, "judge_errors": 5, "judge_error_ratio": 0.05, "suspect_verdicts": 0,
               "failed": None, "score_mean": 4.1, "score_baseline_delta": -0.05, "refusal_ratio": 0.02,
               "refusal_baseline_ratio": 1.0, "output_length_mean_change_ratio": 0.04, "hallucination_ratio": 0.01,
               "psi": 0.03}


def cause(labels: dict[str, str], scene: Views) -> str:
    return explain(labels, scene, DEFAULTS)["probable_cause"]


def cause_id(labels: dict[str, str], scene: Views) -> str:
    return cause(labels, scene).split(":", 1)[0]


def with_quality(scene: Views, **summary: Any) -> Views:
    run = QualityView({MODEL: ModelResult("2026-11-29", 1.0, QualitySummary.from_json({**HEALTHY_RUN, **summary}))},
                      loaded=True)
    return Views(scene.service, scene.infra, scene.topology, run, scene.cost)


# A busy, power-capped GPU and an engine with a queue: facts that must not explain a quality alert.
BUSY = views([target(waiting=12, running=64, error_ratio=0.05)], [gpu(util=0.99, reasons=("sw_power_cap",))])
LENGTH = {"alertname": "QualityOutputLengthMeanShift", "model": MODEL, "layer": "quality"}


@pytest.mark.parametrize(("summary", "expected"), [
    ({"failed": "the judge failed on 9 of 9 samples", "samples": 0, "sampled": 9, "score_mean": None},
     "judge_failing"),
    ({"samples": 12, "sampled": 12}, "small_sample"),
    ({"refusal_ratio": 0.2, "refusal_baseline_ratio": 10.0, "output_length_mean_change_ratio": -0.5},
     "refusals_rose"),
    ({"output_length_mean_change_ratio": -0.45}, "length_changed"),
    ({"score_baseline_delta": -0.8}, "score_fell"),
    ({"hallucination_ratio": 0.09}, "hallucinations"),
    ({}, "unknown"),
])
def test_a_quality_alert_is_explained_by_its_run_only(summary: dict[str, Any], expected: str) -> None:
    text = cause(LENGTH, with_quality(BUSY, **summary))
    assert text.split(":", 1)[0] == expected and "?" not in text
    context = explain(LENGTH, with_quality(BUSY, **summary), DEFAULTS)["context"]
    assert "GPU" not in context and "vllm-a" not in context  # the GPU is no part of a quality verdict


def test_quality_sentences_carry_the_run_numbers() -> None:
    failed = with_quality(BUSY, failed="the judge failed on 9 of 9 samples", samples=0, sampled=9)
    assert cause(LENGTH, failed).startswith("judge_failing: the judge failed on 9 of 9 samples: the run's numbers")
    explained = explain(LENGTH, failed, DEFAULTS)["context"]
    assert f"quality {MODEL} (run 2026-11-29) failed: the judge failed on 9 of 9 samples" in explained
    assert "-45 %" in cause(LENGTH, with_quality(BUSY, output_length_mean_change_ratio=-0.45))
    unknown = cause(LENGTH, with_quality(BUSY))
    assert "samples 95" in unknown and "length_change_size +4 %" in unknown and "gpu" not in unknown
    assert explain(LENGTH, BUSY, DEFAULTS) == {}  # no run at all: nothing, rather than a GPU cause


def gpu_alert(name: str = "GPUUtilizationSaturated") -> dict[str, str]:
    return {"alertname": name, "node": NODE, "gpu": "0", "layer": "infra"}


def test_a_gpu_alert_is_explained_by_that_gpu_and_its_targets_now() -> None:
    """The demo at minute 10: an error burst had left the last minute but still filled the 5m window."""
    after_burst = views([target(running=40, error_ratio=0.01626, last_minute={"error_ratio": 0.0})],
                        [gpu(util=0.99, reasons=("sw_power_cap",))])
    assert cause_id(gpu_alert(), after_burst) == "serving_load"
    assert "40 requests of vllm-a" in cause(gpu_alert("GPUPowerHigh"), after_burst)
    queued = views([target(waiting=20, running=64)], [gpu(util=0.99)])
    assert cause_id(gpu_alert(), queued) == "queue_saturation"
    idle = views([target(running=0)], [gpu(util=0.05)])
    assert cause_id(gpu_alert("GPUUtilizationLow"), idle) == "gpu_idle"
    assert cause_id(gpu_alert(), views([target()], [gpu(mem=0.97)])) == "gpu_memory"
    assert cause_id(gpu_alert(), views([target(running=0)], [gpu(util=0.5, reasons=("hw_thermal",))])) \
        == "gpu_throttling"
    lost = views([target()], [gpu(up=False)])
    assert cause(gpu_alert("GPUDown"), lost).startswith(f"gpu_lost: GPU {NODE}/0 gives no readings")
    # an engine error counts for a service alert over its window, never for the GPU
    erroring = views([target(error_ratio=0.2)], [gpu(util=0.99)])
    assert cause_id(gpu_alert(), erroring) == "serving_load"


def test_a_windowless_service_alert_reads_the_last_minute() -> None:
    after_burst = views([target(error_ratio=0.05, last_minute={"error_ratio": 0.0})], [gpu()])
    assert cause_id({"alertname": "X", "target": "vllm-a", "layer": "service"}, after_burst) == "unknown"
    five = {"alertname": "ErrorRateHigh", "target": "vllm-a", "model": MODEL, "window": "5m", "layer": "service"}
    assert cause_id(five, after_burst) == "engine_errors"  # its own window still holds the burst


def cost_scene(idle_ratio: float | None = 0.1, unpriced: bool = False, baseline: float = 1.0) -> Views:
    h200 = InventoryGpu(NODE, "0", "NVIDIA H200", "nvml", True, 0.9)
    rtx = InventoryGpu("workstation", "0", "NVIDIA GeForce RTX 4090", "nvml", True, 0.1)
    gpus = [GpuCost(h200, None, ("vllm-a",))] if unpriced else []
    numbers = CostNumbers([*gpus, GpuCost(rtx, None, ())], usd_per_hour=3.5, idle_ratio=idle_ratio,
                          baseline_ratio={(MODEL, "5m"): 1.6})
    scene = views([target(throughput_baseline_ratio=baseline)], [gpu(util=0.99, reasons=("sw_power_cap",))])
    return Views(scene.service, scene.infra, scene.topology, None, CostView(0.0, True, numbers))


def test_a_cost_alert_is_explained_by_cost_facts() -> None:
    idle = {"alertname": "CostIdleSpendHigh", "layer": "cost"}
    assert cause(idle, cost_scene(idle_ratio=0.8)).startswith("idle_spend: 80 % of the spend (3.5 $/h) is on idle")
    assert cause_id(idle, cost_scene(idle_ratio=0.2)) == "unknown"  # an unpriced RTX elsewhere explains nothing
    jump = {"alertname": "CostPerTokenJump", "model": MODEL, "window": "5m", "layer": "cost"}
    assert cause_id(jump, cost_scene(baseline=0.5)) == "traffic_drop"
    unpriced = {"alertname": "CostGpuUnpriced", "node": NODE, "gpu": "0", "layer": "cost"}
    assert cause(unpriced, cost_scene(unpriced=True, baseline=0.5)).startswith(f"gpu_unpriced: GPU {NODE}/0 has no")
    context = explain(jump, cost_scene(), DEFAULTS)["context"]
    assert "cost $/token vs. baseline: 160 %" in context and "cost GPUs without a price: workstation/0" in context
    assert "gpu_throttling" not in cause(jump, cost_scene())
    no_cost = views([target()], [gpu()])
    assert explain(idle, no_cost, DEFAULTS) == {}


def test_two_alerts_on_one_model_at_one_instant_agree() -> None:
    """Placed by target or by model only, with or without a window: the same facts, the same cause."""
    scene = with_quality(views([target(waiting=2, running=8)], [gpu(util=0.7, reasons=("sw_thermal",))]))
    by_target = {"alertname": "TTFTP99High", "target": "vllm-a", "model": MODEL, "window": "5m", "layer": "service"}
    by_model = {"alertname": "InferenceCanaryTTFTHigh", "model": MODEL, "probe": "chat", "layer": "canary"}
    fleet = {"alertname": "TPOTObjectiveMissed", "model": MODEL, "window": "5m", "layer": "service"}
    causes = {cause(labels, scene) for labels in (by_target, by_model, fleet)}
    assert len(causes) == 1 and causes.pop().startswith("gpu_throttling:")
    # a quality alert on the same model at the same instant names its run's cause, never a GPU one
    assert cause_id(LENGTH, scene) == "unknown"
    assert cause_id(LENGTH, with_quality(scene, output_length_mean_change_ratio=0.5)) == "length_changed"


def test_docs_causes_md_is_the_table() -> None:
    assert (ROOT / "docs" / "causes.md").read_text() == markdown(), \
        "docs/causes.md is stale: python -m monitor.alerting.causes > docs/causes.md"
    for rule in CAUSES:
        assert f"| {rule.id} | {rule.doc} |" in markdown()
        assert all(isinstance(c.threshold, float | int) or c.threshold in CauseSettings.model_fields
                   for c in rule.when), rule.id
