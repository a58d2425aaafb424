"""What each measured window records beside the latencies, against the simulator: the engine's
prefix-cache share, engine quantiles that only say "below the first bucket", the requests in
flight by Little's law, and the client machine's load and the bench's own CPU time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from monitor.config import CostSettings
from monitor.cost.prices import PriceBook
from monitor.loadtest.client import ClientMeter, Mark, parse_proc_stat
from monitor.loadtest.data import draw_requests, synthetic_dataset
from monitor.loadtest.load import Level
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.scenario import BUILT_IN
from monitor.loadtest.summary import cached, cell
from monitor.service.promql import below_first_bound
from monitor.sim import EngineConfig, LatencyProfile, SimServer, SimulatedEngine
from tests.loadtest.conftest import MODEL, bench

# TPOT 4 ms under vLLM's first TPOT bucket (10 ms), no queue under its first queue bucket (0.3 s).
FAST = LatencyProfile(prefill_s=0.02, prefill_per_token_s=0.0, per_token_s=0.004, output_tokens=(6, 6), jitter=0.0,
                      prefix_hit_ratio=0.5)


def test_a_window_records_the_engines_prefix_cache_share_and_says_so_when_high(start_sim, prompts: Path) -> None:
    server = start_sim(FAST)
    looked_up, found = [], []

    def count(stats) -> None:  # what the engine itself counted, the measured window's and the warm-up's
        looked_up.append(stats.prefix_cache_queries)
        found.append(stats.prefix_cache_hits)

    server.sim.add_observer(count)
    result = bench(server.url, prompts, warmup=0, duration_s=1.0)
    window = result["levels"][0]["repeats"][0]
    # Whole 16-token blocks of half of each prompt: the engine's own hits over its own look-ups.
    assert window["engine"]["prefix_cache_hit_ratio"] == pytest.approx(sum(found) / sum(looked_up), rel=1e-6)
    assert 0.0 < window["engine"]["prefix_cache_hit_ratio"] < 0.5
    result["levels"][0]["summary"]["engine"]["prefix_cache_hit_ratio"]["mean"] = 0.89
    (line,) = cached(result)
    assert line.startswith("c=2: 89% of the prompt tokens came from the engine's prefix cache")


def test_engine_quantiles_from_the_first_bucket_read_as_below_its_bound(start_sim, prompts: Path) -> None:
    server = start_sim(FAST)
    result = bench(server.url, prompts, warmup=0, duration_s=1.0, repeats=2)
    window = result["levels"][0]["repeats"][0]
    # histogram_quantile()'s answer is kept: half the first bound for P50 ...
    assert window["engine"]["tpot_s"]["p50"] == pytest.approx(0.005)
    assert window["engine"]["queue_s"]["p50"] == pytest.approx(0.15)
    # ... and the window says every observation fell under the first bound, which the report shows.
    assert window["engine"]["below_first_bound_s"] == {"queue_s": 0.3, "tpot_s": 0.01}
    level = result["levels"][0]
    assert cell(level, ("engine", "tpot_s", "p50"), "s") == "< 10"
    assert cell(level, ("engine", "queue_s", "p99"), "s") == "< 300"
    assert cell(level, ("engine", "ttft_s", "p99"), "s") != "< 1"  # 20 ms: past the first TTFT bucket
    # One repeat of two past the first bucket: the number, not "<".
    level["summary"]["engine"]["below_first_bound_s"]["tpot_s"]["n"] = 1
    assert not cell(level, ("engine", "tpot_s", "p50"), "s").startswith("<")


def test_below_first_bound_needs_every_observation_in_the_first_bucket() -> None:
    inf = float("inf")
    assert below_first_bound([(0.005, 4.0), (0.001, 4.0), (inf, 4.0)]) == 0.001  # in any order
    assert below_first_bound([(0.001, 3.0), (0.005, 4.0), (inf, 4.0)]) is None
    assert below_first_bound([(0.001, 0.0), (inf, 0.0)]) is None  # nothing observed: nothing to say
    assert below_first_bound([(0.001, 4.0), (0.005, 4.0)]) is None  # no +Inf bucket: no quantile either


def test_in_flight_is_littles_law_on_the_clients_clock(start_sim, prompts: Path) -> None:
    server = start_sim(LatencyProfile(prefill_s=0.05, prefill_per_token_s=0.0, per_token_s=0.01,
                                      output_tokens=(10, 10), jitter=0.0))
    result = bench(server.url, prompts, levels=[Level("concurrency", 4)], warmup=2, duration_s=1.5)
    window = result["levels"][0]["repeats"][0]
    # Throughput x mean latency, every request ok here: the time-averaged number in flight.
    little = window["requests"] / window["duration_s"] * window["e2e_s"]["mean"]
    assert window["in_flight_mean"] == pytest.approx(little, rel=0.05)
    # The lengths as the server counted them (its usage), beside the run's estimates.
    assert window["served_output_tokens"]["p50"] == 10 == window["output_tokens"] / window["requests"]
    assert window["served_input_tokens"]["mean"] == window["prompt_tokens"] / window["requests"]
    # Never more than the four users; less by the client's own time between an answer and the next send.
    assert 0.5 * 4 < window["in_flight_mean"] <= 4.0 + 1e-6


def test_each_window_records_the_client_machine_and_the_benchs_own_cpu(start_sim, prompts: Path) -> None:
    server = start_sim(FAST)
    result = bench(server.url, prompts, warmup=0, duration_s=0.8)
    client = result["levels"][0]["repeats"][0]["client"]
    assert client["cpu_count"] >= 1 and client["load_1m"] >= 0
    assert client["client_cpu_s"] > 0 and client["client_cpu_ratio"] > 0
    requests = result["levels"][0]["repeats"][0]["requests"]
    assert client["client_cpu_ms_per_request"] == pytest.approx(client["client_cpu_s"] * 1000 / requests)
    assert 0 <= client["machine_busy_ratio"] <= 1


def test_proc_stat_and_the_meters_arithmetic() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    assert parse_proc_stat("cpu  100 0 50 800 50 0 0 0 10 0\ncpu0 1 2 3 4\n") == (150.0, 1000.0)
    assert parse_proc_stat("intr 1 2\n") is None
    figures = ClientMeter.figures(Mark(1.0, (150.0, 1000.0), 2.0), Mark(1.5, (650.0, 2000.0), 4.0), 10, 2.0)
    assert figures["client_cpu_s"] == 0.5 and figures["client_cpu_ms_per_request"] == 50.0
    assert figures["machine_busy_ratio"] == 0.5 and figures["load_1m"] == 3.0 and figures["client_cpu_ratio"] == 0.25


def test_a_synthetic_run_sends_no_prompt_twice(prompts: Path) -> None:
    server = SimServer(SimulatedEngine(EngineConfig(deterministic=True, min_step_s=0.001), FAST))
    bodies: list[bytes] = []
    inner = server.app

    async def recording(scope: Any, receive: Any, send: Any) -> None:  # the prompts as the server got them
        async def read() -> Any:
            message = await receive()
            if scope.get("path") == "/v1/chat/completions" and message["type"] == "http.request":
                bodies.append(message.get("body", b""))
            return message

        await inner(scope, read, send)

    server.app = recording  # type: ignore[assignment]
    with server:
        config = BenchConfig(target=server.url, model=MODEL, scenario=BUILT_IN["chat"],
                             dataset=synthetic_dataset(BUILT_IN["chat"]), levels=[Level("concurrency", 4)],
                             duration_s=0.8, repeats=2, warmup=3, seed=11)
        result = asyncio.run(run_bench(config, None, PriceBook(CostSettings())))
    prompts_sent = [json.loads(body)["messages"][0]["content"] for body in bodies]
    measured = sum(w["requests"] for w in result["levels"][0]["repeats"])
    assert len(prompts_sent) == measured + 3 > 10
    assert len(set(prompts_sent)) == len(prompts_sent)
    assert result["conditions"]["workload"]["dataset"]["unique_per_request"] is True
    # The same seed again: the same prompts, the stream's first ones (their arrival order is the
    # concurrent users' race).
    again = draw_requests(config.dataset, config.scenario, 0, 11)
    assert {r.messages[0]["content"] for r in again[:len(prompts_sent)]} == set(prompts_sent)
