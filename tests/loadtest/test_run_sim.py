"""`infermon bench` against the simulator on loopback, told its latency model.

The simulator produces each request's first token `prefill_s x jitter` after arrival, in its own
model time, and reports exactly that to its observers: the delays it imposed. The client sees each
token later by the loopback round trip and the two event loops' wake-up lateness, never earlier,
so a client percentile lies between the imposed one and that plus TRANSPORT_S: 2-30 ms on an idle
machine, up to 160 ms at P95 measured on this 2-core one shared with other builds (load 16). The
imposed distribution is made wide enough (1.5 s) that this bound still tells P50 from P95.
"""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path
from typing import Any

import pytest

import monitor
from monitor.config import CostSettings, Price
from monitor.cost.prices import PriceBook
from monitor.loadtest.load import CLIENTS, Level
from monitor.loadtest.sampling import NvmlSource, local_source
from monitor.loadtest.stats import percentile
from monitor.sim import LatencyProfile
from monitor.sim.stats import IterationStats
from tests.loadtest.conftest import H200_TRACE, MODEL, bench

TRANSPORT_S = 0.25
# Client timings of an in-process simulator, held to fractions of a second: a worker's burst beside
# it breaks the P50 bar (docs/performance.md). It runs first, with no neighbours.
pytestmark = pytest.mark.alone


def _imposed_ttfts(server: Any) -> list[float]:
    seen: list[float] = []
    server.sim.add_observer(lambda stats: seen.extend(stats.time_to_first_tokens))
    return seen


def _measured_only(server: Any) -> tuple[list[float], Any]:
    """The imposed TTFTs of the measured requests: recording starts with the first measured window
    (the warm-up has finished by then: it waits for its last answer)."""
    seen: list[float] = []
    measuring = False

    def observe(stats: IterationStats) -> None:
        if measuring:
            seen.extend(stats.time_to_first_tokens)

    def progress(phase: str, label: str, done: float, finished: int) -> None:
        nonlocal measuring
        measuring = measuring or phase == "measure"

    server.sim.add_observer(observe)
    return seen, progress


@pytest.mark.parametrize("client", CLIENTS)  # the bench's own client and the SDK's: both read the same clock
def test_reported_percentiles_are_the_imposed_distribution(start_sim, prompts: Path, client: str) -> None:
    # TTFT uniform on [0.05, 1.55] s: P50 (0.8) and P95 (1.475) far further apart than the transport bound.
    profile = LatencyProfile(prefill_s=0.8, prefill_per_token_s=0.0, per_token_s=0.005, output_tokens=(4, 4),
                             jitter=0.9375)
    server = start_sim(profile)
    imposed, progress = _measured_only(server)
    # The warm-up pays for the connections and the SDK's first call, as it would in front of an engine.
    result = bench(server.url, prompts, levels=[Level("concurrency", 16)], duration_s=2.5, warmup=16,
                   progress=progress, client=client)
    assert result["conditions"]["tool"]["client"] == client
    ttft = result["levels"][0]["repeats"][0]["ttft_s"]
    # At least a round of the 16 slots: ~50 requests on a quiet machine, 21 were seen beside two CPU hogs.
    assert len(imposed) == result["levels"][0]["repeats"][0]["requests"] >= 16
    # Never below the model's lower bound; above its upper one only by the simulator loop's own lateness.
    assert min(imposed) >= 0.05 and max(imposed) <= 1.55 + TRANSPORT_S
    samples = result["levels"][0]["ttft_samples_s"]
    assert len(samples) == len(imposed)
    for p in (50, 95, 99):
        # What is reported is the percentile of what was measured ...
        assert ttft[f"p{p}"] == pytest.approx(percentile(samples, p), abs=1e-9), p
    # ... and what was measured is the imposed distribution, late by the transport: every order
    # statistic at or above the imposed one, and all but the few the machine delayed (a 0.4 s stall
    # of one request was seen on CI's busy machine: that is P99 of 40 samples) within TRANSPORT_S.
    late = [c - s for c, s in zip(sorted(samples), sorted(imposed), strict=True)]
    assert min(late) >= -0.002
    assert sum(1 for d in late if d > TRANSPORT_S) <= max(1, len(late) // 20), late
    for p in (50, 95):
        server_side = percentile(imposed, p)
        assert server_side is not None
        assert server_side - 0.002 <= ttft[f"p{p}"] <= server_side + TRANSPORT_S, p
    # TPOT: at most the imposed 5 ms x jitter per token (4 tokens, 3 gaps) plus the lateness shared out;
    # it can read less, when a late first token arrives together with the next ones.
    assert result["levels"][0]["repeats"][0]["tpot_s"]["p50"] <= 0.01 + TRANSPORT_S / 3


def test_slow_warm_up_requests_do_not_appear(start_sim, prompts: Path) -> None:
    server = start_sim(LatencyProfile(prefill_s=0.02, prefill_per_token_s=0.0, per_token_s=0.005,
                                      output_tokens=(4, 4), jitter=0.0))
    # Warm-up TTFT 1.2 s, sixty times the measured 20 ms: a measured request would have to be a
    # second late to read like a warm-up one (beside a busy worker, one was 0.55 s late).
    server.sim.inject("latency_spike", 60.0)
    imposed = _imposed_ttfts(server)

    def progress(phase: str, label: str, done: float, finished: int) -> None:
        if phase == "measure":
            server.sim.clear_injected()  # from the first measured request on: 20 ms

    result = bench(server.url, prompts, warmup=4, duration_s=1.0, progress=progress)
    assert result["warmup"] == {"requests": 4, "failed": 0, "excluded": True}
    assert sum(1 for t in imposed if t >= 1.0) == 4  # the four slow ones were sent ...
    measured = result["levels"][0]["repeats"][0]
    assert measured["ttft_s"]["p50"] < 0.25  # ... and are not among the measured
    assert max(result["levels"][0]["ttft_samples_s"]) < 1.0
    assert measured["requests"] == len(imposed) - 4


def test_concurrency_is_what_was_asked_as_the_server_counts_it(start_sim, prompts: Path) -> None:
    server = start_sim(LatencyProfile(prefill_s=0.05, prefill_per_token_s=0.0, per_token_s=0.01,
                                      output_tokens=(20, 20), jitter=0.0))
    in_server: list[int] = []
    sim = server.sim

    def count(stats: IterationStats) -> None:
        in_server.append(len(sim.running) + len(sim.waiting))

    sim.add_observer(count)
    result = bench(server.url, prompts, levels=[Level("concurrency", 1), Level("concurrency", 6)], warmup=0,
                   duration_s=2.0, sample_interval_s=0.2)
    one, six = (level["repeats"][0] for level in result["levels"])
    assert max(in_server) == 6
    assert one["engine"]["requests_running"]["max"] == 1
    assert six["engine"]["requests_running"]["max"] == 6
    # Closed loop: a slot is empty only between a request's end and the next one's arrival (longer
    # on a busy machine: the summary calls out a level the engine saw less than 80 % of).
    assert six["engine"]["requests_running"]["mean"] > 3
    # The engine's own counters over the same window: every measured request, every token.
    assert six["engine"]["requests"] == pytest.approx(six["requests"], rel=1e-3)
    assert six["engine"]["generation_tokens"] == pytest.approx(six["output_tokens"], rel=1e-3)


def test_a_poisson_rate_sends_the_seeded_arrivals(start_sim, prompts: Path) -> None:
    server = start_sim(LatencyProfile(prefill_s=0.01, prefill_per_token_s=0.0, per_token_s=0.002,
                                      output_tokens=(4, 4), jitter=0.0))
    result = bench(server.url, prompts, levels=[Level("rate", 25.0)], warmup=0, duration_s=1.0, seed=5)
    rng, arrival, expected = random.Random(5), 0.0, 0
    while (arrival := arrival + rng.expovariate(25.0)) < 1.0:
        expected += 1
    assert result["levels"][0]["repeats"][0]["requests"] == expected
    assert result["conditions"]["workload"]["levels"] == [{"kind": "rate", "value": 25.0, "label": "25 req/s"}]


def test_conditions_from_the_h200_replay_and_the_engine_page(start_sim, prompts: Path) -> None:
    server = start_sim(LatencyProfile(prefill_s=0.02, prefill_per_token_s=0.0, per_token_s=0.005,
                                      output_tokens=(10, 10), jitter=0.0))
    source = local_source(str(H200_TRACE), replay_count=2)
    assert isinstance(source, NvmlSource)
    prices = PriceBook(CostSettings(gpu_prices={"H200": Price(usd_per_hour=3.0)}))
    result = bench(server.url, prompts, gpus=source, prices=prices, precision="fp8", note="chunked prefill 256")
    conditions = result["conditions"]
    assert conditions["gpu"] == {"source": "replay", "model": "NVIDIA H200", "count": 2, "models": ["NVIDIA H200"],
                                 "driver": "580.159.04", "cuda": None, "memory_total_bytes": 150754820096.0,
                                 "health": None, "health_reasons": []}  # the H200 recording holds no health field
    assert conditions["server"]["engine"] == "vllm" and conditions["server"]["generation"] == "v1"
    assert conditions["server"]["version"] == f"infermon-sim {monitor.__version__}"  # its GET /version
    assert conditions["server"]["models"] == [MODEL]
    assert conditions["server"]["config"]["cache_config_info"]["block_size"] == "16"
    assert conditions["user"] == {"precision": "fp8", "note": "chunked prefill 256"}
    assert conditions["workload"]["dataset"]["sha256"] == hashlib.sha256(prompts.read_bytes()).hexdigest()
    assert conditions["tool"]["name"] == "infermon bench"
    assert result["schema_version"] == 1 and result["synthetic"] is False
    window = result["levels"][0]["repeats"][0]
    gpu = window["gpu"]
    assert gpu["energy_from"] == "counter" and gpu["energy_joules"] > 0
    assert gpu["joules_per_output_token"] == pytest.approx(gpu["energy_joules"] / window["output_tokens"])
    assert 2 * 40 < gpu["power_watts"] < 2 * 700  # two replayed GPUs, each between idle and its limit


def test_dollars_per_million_tokens_is_price_over_throughput(start_sim, prompts: Path) -> None:
    server = start_sim(LatencyProfile(prefill_s=0.02, prefill_per_token_s=0.0, per_token_s=0.005,
                                      output_tokens=(10, 10), jitter=0.0))
    result = bench(server.url, prompts, gpus=local_source(str(H200_TRACE)), gpu_price_usd_per_hour=3.6)
    window = result["levels"][0]["repeats"][0]
    per_second = 3.6 / 3600.0
    assert window["cost"]["usd_per_hour"] == 3.6
    assert window["cost"]["usd_per_million_output_tokens"] == pytest.approx(
        per_second / window["output_tokens_per_s"] * 1e6)
    assert window["cost"]["usd_per_million_total_tokens"] == pytest.approx(
        per_second / window["total_tokens_per_s"] * 1e6)
    assert result["conditions"]["price"]["source"] == "command line"
    assert not math.isnan(result["levels"][0]["summary"]["cost"]["usd_per_million_output_tokens"]["mean"])


def test_an_unreachable_target_is_counted_not_raised(prompts: Path) -> None:
    result = bench("http://127.0.0.1:9", prompts, warmup=0, duration_s=0.3)
    window = result["levels"][0]["repeats"][0]
    assert window["requests"] > 0 and window["failed"] == window["requests"]
    assert set(window["outcomes"]) == {"refused"}
    reasons = window["failure_reasons"]["refused"]  # why, not only how many
    assert 1 <= len(reasons) <= 3 and all("onnect" in reason for reason in reasons), reasons
    assert result["conditions"]["server"]["engine"] is None  # not observed, not guessed
