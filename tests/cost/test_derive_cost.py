"""The cost numbers from plain inputs: spend splits, unknown GPUs, zero throughput, expensive requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import load_settings
from monitor.cost.derive import (
    CostNumbers,
    SpendHistory,
    baseline_ratios,
    derive_costs,
    expensive_share,
    split_by_day,
)
from monitor.cost.inventory import InventoryGpu
from monitor.cost.prices import PriceBook
from monitor.service.derive import Objectives, Window, WindowStats
from monitor.service.view import ServiceView, TargetView
from monitor.topology import Topology

H100 = "NVIDIA H100 80GB HBM3"
WINDOWS = [Window("1m", 60.0)]


def gpu(node: str, index: int, model: str = H100, utilization: float | None = 0.5) -> InventoryGpu:
    return InventoryGpu(node, str(index), model, "nvml", True, utilization)


def service(**targets: dict[str, WindowStats]) -> ServiceView:
    view = ServiceView(ts=0.0, windows=WINDOWS, objectives=Objectives())
    for name, by_model in targets.items():
        view.targets[name] = TargetView(name, True, "vllm", "v1",
                                        stats={(model, "1m"): stats for model, stats in by_model.items()})
    return view


def derive(gpus: list[InventoryGpu], targets: list[dict[str, object]], view: ServiceView,
           models: dict[str, frozenset[str]], **cost: object) -> CostNumbers:
    settings = load_settings(None, {"cost": cost, "service": {
        "targets": [{"url": f"http://{t['name']}/metrics", **t} for t in targets]}})
    topo = Topology(settings.service.targets, "n1").resolve(g.seen() for g in gpus)
    return derive_costs(gpus, PriceBook(settings.cost), topo, models, view, 2.0)


def test_spend_per_target_and_model_and_dollars_per_million_tokens() -> None:
    gpus = [gpu("n1", i) for i in range(4)]
    view = service(a=({"llama": WindowStats(generation_tokens_per_second=5200.0, prompt_tokens_per_second=2600.0)}))
    numbers = derive(gpus, [{"name": "a", "gpus": [0, 1]}], view, {"a": frozenset({"llama"})})
    assert numbers.usd_per_hour == 4 * 2.5  # the fleet pays for all four
    assert numbers.by_target == {"a": 5.0}
    assert numbers.by_model == {"llama": 5.0}
    assert numbers.per_million[("llama", "1m", "generated")] == pytest.approx(5.0 / 3600 / 5200 * 1e6)
    assert numbers.per_million[("llama", "1m", "all")] == pytest.approx(5.0 / 3600 / 7800 * 1e6)
    assert numbers.idle_usd_per_hour == pytest.approx(4 * 2.5 * 0.5)
    assert numbers.idle_ratio == pytest.approx(0.5)


def test_a_shared_gpu_is_split_not_counted_twice() -> None:
    gpus = [gpu("n1", 0), gpu("n1", 1)]
    targets = [{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [0, 1]}]
    numbers = derive(gpus, targets, service(), {})
    assert numbers.by_target == {"a": 1.25, "b": 1.25 + 2.5}
    assert sum(numbers.by_target.values()) == numbers.usd_per_hour


def test_unknown_gpu_has_no_price_and_its_model_no_spend() -> None:
    gpus = [gpu("n1", 0), gpu("n1", 1, model="NVIDIA GH200 480GB")]
    view = service(a={"llama": WindowStats(generation_tokens_per_second=100.0)})
    numbers = derive(gpus, [{"name": "a", "gpus": [0, 1]}], view, {"a": frozenset({"llama"})})
    assert [(c.gpu.gpu, c.quote is None) for c in numbers.gpus] == [("0", False), ("1", True)]
    assert numbers.usd_per_hour == 2.5  # what is priced; the unpriced GPU is reported, not guessed
    assert numbers.by_target == {} and numbers.by_model == {} and numbers.per_million == {}
    assert numbers.fleet_per_million == {}  # the fleet's spend is partial: no $/token from it
    assert numbers.idle_usd_per_hour == pytest.approx(1.25)  # over the priced GPU only


def test_zero_throughput_gives_no_sample_and_a_down_target_still_costs() -> None:
    gpus = [gpu("n1", 0), gpu("n1", 1)]
    targets = [{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [1]}]
    idle = service(a={"llama": WindowStats(generation_tokens_per_second=0.0, prompt_tokens_per_second=0.0)})
    numbers = derive(gpus, targets, idle, {"a": frozenset({"llama"})})
    assert numbers.by_model == {"llama": 2.5}
    assert numbers.per_million == {}  # never infinity
    # b is down (no stats) but served llama before: its GPU costs, it produces nothing.
    busy = service(a={"llama": WindowStats(generation_tokens_per_second=1000.0, prompt_tokens_per_second=0.0)})
    numbers = derive(gpus, targets, busy, {"a": frozenset({"llama"}), "b": frozenset({"llama"})})
    assert numbers.per_million[("llama", "1m", "generated")] == pytest.approx(5.0 / 3600 / 1000 * 1e6)


def test_the_fleet_cost_per_token_needs_no_mapping() -> None:
    # One box, 8 H200 at the default $3.5/h, one vLLM target that says nothing about its GPUs.
    gpus = [gpu("box", i, model="NVIDIA H200") for i in range(8)]
    view = service(a={"llama": WindowStats(generation_tokens_per_second=4000.0, prompt_tokens_per_second=1000.0)})
    numbers = derive(gpus, [{"name": "a"}], view, {"a": frozenset({"llama"})})
    assert numbers.usd_per_hour == 8 * 3.5
    assert numbers.fleet_per_million[("1m", "generated")] == pytest.approx(28.0 / 3600 / 4000 * 1e6)
    assert numbers.fleet_per_million[("1m", "all")] == pytest.approx(28.0 / 3600 / 5000 * 1e6)
    # ... and, the box holding every GPU and target, the target is mapped to them: $/token per model too.
    assert numbers.by_target == {"a": 28.0}
    assert numbers.per_million[("llama", "1m", "generated")] == pytest.approx(28.0 / 3600 / 4000 * 1e6)


def test_the_fleet_cost_per_token_sums_every_target_mapped_or_not() -> None:
    gpus = [gpu("n1", 0), gpu("n2", 0)]  # two nodes: no default mapping
    view = service(a={"llama": WindowStats(generation_tokens_per_second=600.0)},
                   b={"qwen": WindowStats(generation_tokens_per_second=400.0)})
    numbers = derive(gpus, [{"name": "a"}, {"name": "b"}], view, {"a": frozenset({"llama"}), "b": frozenset({"qwen"})})
    assert numbers.by_target == {} and numbers.per_million == {}
    assert numbers.fleet_per_million[("1m", "generated")] == pytest.approx(5.0 / 3600 / 1000 * 1e6)


def test_static_gpus_are_paid_for_but_have_no_idle_reading() -> None:
    static = InventoryGpu("rack-3", "0", "NVIDIA H200", "static", None, None)
    numbers = derive([static], [], service(), {}, gpu_prices={"H200": {"usd_per_hour": 3.5}})
    assert numbers.usd_per_hour == 3.5
    assert numbers.idle_usd_per_hour is None and numbers.idle_ratio is None


def test_expensive_share_against_the_baseline_p99() -> None:
    # Baseline: 100 requests, all at most 1000 prompt tokens, 99 of them at most 500: P99 = 500.
    baseline = {100.0: 50.0, 500.0: 99.0, 1000.0: 100.0, float("inf"): 100.0}
    # Window: 10 requests, 3 of them between 1000 and 5000 tokens (beyond 2 x 500 = 1000).
    window = {100.0: 5.0, 500.0: 7.0, 1000.0: 7.0, 5000.0: 10.0, float("inf"): 10.0}
    stats = WindowStats(lengths={"prompt_len": window}, baseline_lengths={"prompt_len": baseline})
    found = expensive_share(stats, "prompt", 2.0)
    assert found is not None
    assert found.baseline_p99_tokens == pytest.approx(500.0)
    assert found.threshold_tokens == pytest.approx(1000.0)
    assert found.ratio == pytest.approx(0.3)
    assert expensive_share(stats, "generated", 2.0) is None  # no generation-length histogram
    empty = WindowStats(lengths={"prompt_len": {100.0: 0.0, float("inf"): 0.0}},
                        baseline_lengths={"prompt_len": baseline})
    assert expensive_share(empty, "prompt", 2.0) is None  # no request in the window: no share


def test_per_token_baseline_ratio_from_the_spend_history() -> None:
    history = SpendHistory(keep_seconds=3600 + 60)
    for ts in range(0, 600, 15):  # ten minutes at 1000 tokens/s on $5/h
        history.add(float(ts), CostNumbers(by_model={"m": 5.0}, throughput={("m", "1m"): (1000.0, 1000.0)}))
    now = CostNumbers(by_model={"m": 5.0}, throughput={("m", "1m"): (500.0, 500.0)},
                      per_million={("m", "1m", "generated"): 5.0 / 3600 / 500 * 1e6})
    ratios = baseline_ratios(now, history, 660.0, {"1m": 60.0}, 600.0)
    assert ratios == {("m", "1m"): pytest.approx(2.0)}  # half the tokens for the same money


def test_split_by_day_cuts_at_local_midnight() -> None:
    from zoneinfo import ZoneInfo

    shanghai = ZoneInfo("Asia/Shanghai")  # UTC+8: local midnight is 16:00 UTC
    start = 1_767_282_000.0  # 2026-01-01 15:40:00 UTC = 23:40 in Shanghai
    assert split_by_day(start, start + 3600, shanghai) == [("2026-01-01", 1200.0), ("2026-01-02", 2400.0)]
    assert split_by_day(start, start + 3600, ZoneInfo("UTC")) == [("2026-01-01", 3600.0)]


def test_fleet_sums_request_length_buckets_on_shared_bounds_for_window_and_baseline() -> None:
    from monitor.service.derive import Rates, fleet_rates, stats_from_rates

    inf = float("inf")
    a = Rates(buckets={"prompt_len": {100.0: 1.0, 500.0: 2.0, inf: 2.0}},
              baseline_buckets={"prompt_len": {100.0: 3.0, 500.0: 4.0, inf: 4.0}})
    b = Rates(buckets={"prompt_len": {100.0: 1.0, 200.0: 1.5, 500.0: 2.0, inf: 2.0}},
              baseline_buckets={"prompt_len": {100.0: 1.0, 250.0: 1.0, 500.0: 1.0, inf: 1.0}})
    fleet = fleet_rates([{"m": a}, {"m": b}])["m"]
    assert fleet.buckets == {"prompt_len": {100.0: 2.0, 500.0: 4.0, inf: 4.0}}
    assert fleet.baseline_buckets == {"prompt_len": {100.0: 4.0, 500.0: 5.0, inf: 5.0}}
    stats = stats_from_rates(fleet, Objectives())
    assert stats.lengths == fleet.buckets and stats.baseline_lengths == fleet.baseline_buckets
    assert "prompt_len" not in stats.quantiles  # lengths are not exported as summaries


def test_per_token_baseline_exists_only_once_its_window_is_covered() -> None:
    from monitor.cost.derive import CostNumbers, SpendHistory, baseline_ratios

    history = SpendHistory(60 + 2 * 600)
    steady = CostNumbers(by_model={"m": 2.5}, throughput={("m", "1m"): (100.0, 150.0)},
                         per_million={("m", "1m", "generated"): 2.5 / 3600 / 100 * 1e6})

    def ratio_at(now: float) -> float | None:
        return baseline_ratios(steady, history, now, {"1m": 60.0}, 600.0, 0.9).get(("m", "1m"))

    for ts in range(0, 721, 15):
        history.add(1_000_000 + ts, steady)
        if ts == 300:  # the samples reach back 240 s of the 600 s baseline before the window
            assert ratio_at(1_000_000 + ts) is None
    assert history.coverage("m", "1m", 1_000_000 + 60, 1_000_000 + 600) == pytest.approx(1.0)
    assert ratio_at(1_000_000 + 720) == pytest.approx(1.0)  # covered: steady spend and tokens, 1.0
    assert ratio_at(1_000_000 + 585) is None  # 525 s of 600 s: below 90 %, no baseline


def test_per_token_baseline_samples_survive_a_restart(tmp_path: Path) -> None:
    from monitor.cost.store import SpendPoints
    from monitor.store.session import Store

    store = Store(f"sqlite:///{tmp_path / 'spend.db'}")
    try:
        points = SpendPoints(store.engine)
        points.save([("m", "1m", 1_000.0, 2.5, 100.0), ("m", "1m", 1_060.0, 2.5, 110.0)], before_ts=0.0)
        points.save([("m", "1m", 1_120.0, 2.5, 120.0)], before_ts=1_050.0)  # pruned to what is needed
        assert SpendPoints(store.engine).load(0.0) == [("m", "1m", 1_060.0, 2.5, 110.0),
                                                       ("m", "1m", 1_120.0, 2.5, 120.0)]
    finally:
        store.close()
