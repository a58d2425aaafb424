"""The simulator's serving shapes (monitor.sim.tiers): a host-memory KV tier, a P/D split, an MoE
model, their faults, and the engine-native families each page prints for them, over real HTTP."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.service.engines import detect
from monitor.sim import EngineConfig, LatencyProfile, SimServer, SimulatedEngine
from monitor.sim.faults import DEFAULT_MAGNITUDE, Fault, combine_effects, parse_fault
from monitor.sim.tiers import KV_BYTES_PER_TOKEN, HostTier, HostTierState, MoeProfile, PdSplit, prefix_key

FAST = LatencyProfile(output_tokens=(3, 3), per_token_s=0.002, prefix_hit_ratio=0.0, jitter=0.0)
SESSION = "session one " + "alpha beta gamma " * 200  # 602 words: one session's prefix
SHAPES = ("vllm:kv_offload", "vllm:nixl", "sglang:load_back", "sglang:eviction", "sglang:kv_transfer",
          "sglang:eplb", "sglang:hicache")


def _families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _total(families: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **match: str) -> float:
    return sum(v for labels, v in families.get(name, {}).items() if match.items() <= dict(labels).items())


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[SimServer] = []

    def start(**config: object) -> SimServer:
        config.setdefault("deterministic", True)
        config.setdefault("min_step_s", 0.001)
        server = SimServer(SimulatedEngine(EngineConfig(**config), FAST)).start()  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _send(server: SimServer, prompt: str, times: int = 1) -> None:
    for _ in range(times):
        answer = httpx.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 3}, timeout=30)
        assert answer.status_code == 200, answer.text


def test_a_default_simulator_prints_no_serving_family(serve) -> None:
    server = serve()
    _send(server, SESSION, 2)
    page = httpx.get(server.metrics_url).text
    assert not [line for line in page.splitlines() if line.startswith(SHAPES)]
    assert server.sim.scheduler.host is None


def test_a_revisited_prefix_is_loaded_back_not_recomputed_on_the_vllm_page(serve) -> None:
    server = serve(host_tier=HostTier())
    _send(server, SESSION + " first turn")  # cold: computed, stored to host memory
    _send(server, SESSION + " second turn", 2)  # warm: swapped back
    fam = _families(httpx.get(server.metrics_url).text)
    words = len((SESSION + " second turn").split())
    loaded = (words - 1) // 16 * 16  # whole blocks, never the last token (no GPU hit in this profile)
    assert fam["vllm:kv_offload_load_size_count"] and _total(fam, "vllm:kv_offload_load_size_count") == 2
    assert _total(fam, "vllm:kv_offload_load_bytes_total") == 2 * loaded * KV_BYTES_PER_TOKEN
    # The deprecated transfer_type triple says the same, as vLLM's CPU tier still prints it.
    old = _total(fam, "vllm:kv_offload_total_bytes_total", transfer_type="CPU_to_GPU")
    assert old == 2 * loaded * KV_BYTES_PER_TOKEN
    stored = len((SESSION + " first turn").split())
    # The cold prompt once: the warm ones are no longer, so host memory already held all of them.
    assert _total(fam, "vllm:kv_offload_store_bytes_total") == stored * KV_BYTES_PER_TOKEN
    assert _total(fam, "vllm:external_prefix_cache_hits_total") == 2 * loaded
    assert _total(fam, "vllm:prompt_tokens_cached_by_source_total", source="host") == 2 * loaded
    assert _total(fam, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 2 * loaded
    # Each load took the tier's model time: overhead + bytes over the link.
    tier = HostTier()
    assert _total(fam, "vllm:kv_offload_load_time_total") == pytest.approx(2 * tier.transfer_s(loaded))


def test_the_sglang_page_has_the_swap_back_histogram_and_a_slow_tier_moves_its_p99(serve) -> None:
    server = serve(host_tier=HostTier(), page="sglang")
    _send(server, SESSION + " cold")
    _send(server, SESSION + " warm", 3)
    text = httpx.get(server.metrics_url).text
    spec = detect(text)
    assert spec is not None and spec.engine == "sglang"
    fam = _families(text)
    healthy = (_total(fam, "sglang:load_back_duration_seconds_sum")
               / _total(fam, "sglang:load_back_duration_seconds_count"))
    server.sim.inject("slow_kv_tier", 20.0)
    _send(server, SESSION + " slow", 3)
    fam = _families(httpx.get(server.metrics_url).text)
    assert _total(fam, "sglang:load_back_duration_seconds_count") == 6
    slow = (_total(fam, "sglang:load_back_duration_seconds_sum") - 3 * healthy) / 3
    assert slow == pytest.approx(20 * healthy, rel=0.01)
    assert _total(fam, "sglang:load_back_tokens_total") > 0 and _total(fam, "sglang:evicted_tokens_total") > 0
    loaded = _total(fam, "sglang:load_back_tokens_total")
    assert _total(fam, "sglang:cached_tokens_total", cache_source="host") == loaded
    assert _total(fam, "sglang:hicache_host_total_tokens") == HostTier().capacity_tokens
    # SGLang's bounds, 1 ms .. 1 s: histogram_quantile over them is the monitor's P99
    bounds = {dict(k)["le"] for k in fam["sglang:load_back_duration_seconds_bucket"]}
    assert {"0.001", "0.05", "1.0", "+Inf"} <= bounds


def test_the_host_tier_keeps_sessions_least_recently_used_first() -> None:
    state = HostTierState(HostTier(capacity_tokens=1000))
    assert state.store("a", 600) == (600, 0) and state.lookup("a") == 600
    assert state.store("a", 600) == (0, 0)  # held already: nothing copied
    assert state.store("a", 600, again=True) == (600, 0)  # evicted from the GPU again: copied again
    assert state.store("b", 600) == (600, 600)  # "a", least recently used, makes room
    assert state.lookup("a") == 0 and state.lookup("b") == 600
    assert state.usage() == pytest.approx(0.6)
    assert prefix_key("a b c " + "d " * 100) == prefix_key("a b c " + "d " * 100 + "another turn")
    assert prefix_key("a b c") != prefix_key("a b d")


def test_pd_split_ttft_is_prefill_plus_transfer_plus_first_decode_and_failures_recompute(serve) -> None:
    pd = PdSplit()
    server = serve(pd=pd, page="sglang")
    ttfts: list[float] = []
    server.sim.add_observer(lambda stats: ttfts.extend(stats.time_to_first_tokens))
    _send(server, SESSION)
    words = len(SESSION.split())
    prefill = FAST.prefill_s + FAST.prefill_per_token_s * words
    assert ttfts[0] >= prefill + pd.transfer_s(words) + FAST.per_token_s - 1e-9
    fam = _families(httpx.get(server.metrics_url).text)
    assert _total(fam, "sglang:kv_transfer_latency_ms_sum") == pytest.approx(pd.transfer_s(words) * 1000)
    server.sim.inject("pd_transfer_fail", 1.0)
    _send(server, SESSION)
    assert ttfts[1] >= 2 * prefill + pd.transfer_s(words)  # recomputed on the decode side
    fam = _families(httpx.get(server.metrics_url).text)
    assert _total(fam, "sglang:num_transfer_failed_reqs_total") == 1
    assert _total(fam, "sglang:kv_transfer_latency_ms_count") == 1  # a failed transfer is not a latency


def test_pd_split_on_the_vllm_page_is_nixl(serve) -> None:
    server = serve(pd=PdSplit())
    _send(server, SESSION, 2)
    server.sim.inject("pd_transfer_slow", 30.0)
    _send(server, SESSION)
    fam = _families(httpx.get(server.metrics_url).text)
    assert _total(fam, "vllm:nixl_xfer_time_seconds_count") == 3
    words = len(SESSION.split())
    assert _total(fam, "vllm:nixl_bytes_transferred_sum") == 3 * words * KV_BYTES_PER_TOKEN
    assert _total(fam, "vllm:nixl_xfer_time_seconds_sum") == pytest.approx(32 * PdSplit().transfer_s(words))
    assert _total(fam, "vllm:nixl_num_failed_transfers_total") == 0


def test_moe_balancedness_is_drawn_around_its_level_and_the_fault_lowers_it(serve) -> None:
    server = serve(moe=MoeProfile(), page="sglang")
    _send(server, "a short question", 4)
    fam = _families(httpx.get(server.metrics_url).text)
    count = _total(fam, "sglang:eplb_balancedness_count", forward_mode="decode")
    mean = _total(fam, "sglang:eplb_balancedness_sum") / count
    assert count >= 4 and abs(mean - MoeProfile().balancedness) <= MoeProfile().jitter
    server.sim.inject("moe_imbalance", 0.5)
    _send(server, "a short question", 4)
    fam = _families(httpx.get(server.metrics_url).text)
    later = (_total(fam, "sglang:eplb_balancedness_sum") - mean * count) / (
        _total(fam, "sglang:eplb_balancedness_count") - count)
    assert later == pytest.approx(0.5 * MoeProfile().balancedness, abs=0.5 * MoeProfile().jitter + 1e-9)
    assert MoeProfile().step_slowdown(0.5) > 1.0  # the busiest rank holds every decode step back


def test_the_new_faults_parse_and_combine_like_the_others() -> None:
    for kind in ("slow_kv_tier", "kv_tier_thrash", "pd_transfer_fail", "pd_transfer_slow", "moe_imbalance"):
        fault = parse_fault({"kind": kind})
        assert fault.magnitude == DEFAULT_MAGNITUDE[kind] and math.isinf(fault.duration_s)
    with pytest.raises(ValueError, match="fraction"):
        parse_fault({"kind": "kv_tier_thrash", "magnitude": 2})
    effects = combine_effects([Fault(0, 10, "pd_transfer_fail", 0.5), Fault(0, 10, "pd_transfer_fail", 0.5),
                               Fault(0, 10, "slow_kv_tier", 4.0), Fault(0, 10, "moe_imbalance", 0.5)])
    assert effects.pd_fail_fraction == pytest.approx(0.75) and effects.tier_time_mult == 4.0
    assert effects.moe_balance_mult == 0.5 and effects.prefill_mult == 1.0
    assert combine_effects([]).tier_gpu_keep == 1.0


def test_a_thrashing_gpu_loads_back_about_what_it_evicted(serve) -> None:
    # kv_tier_thrash: the GPU keeps 5 % of its prefix hits; each turn is evicted to host memory whole
    # and loaded back at the next: tokens loaded back ~ tokens evicted (the rule's 0.8-1.25 band).
    profile_hits = LatencyProfile(output_tokens=(3, 3), per_token_s=0.002, prefix_hit_ratio=0.35, jitter=0.0)
    server = SimServer(SimulatedEngine(EngineConfig(host_tier=HostTier(), page="sglang", deterministic=True,
                                                    min_step_s=0.001), profile_hits)).start()
    try:
        _send(server, SESSION)
        healthy = _families(httpx.get(server.metrics_url).text)
        server.sim.inject("kv_tier_thrash", 0.05)
        _send(server, SESSION, 5)
        fam = _families(httpx.get(server.metrics_url).text)
    finally:
        server.stop()
    loaded = _total(fam, "sglang:load_back_tokens_total") - _total(healthy, "sglang:load_back_tokens_total")
    evicted = _total(fam, "sglang:evicted_tokens_total") - _total(healthy, "sglang:evicted_tokens_total")
    assert 0.8 < loaded / evicted < 1.25
