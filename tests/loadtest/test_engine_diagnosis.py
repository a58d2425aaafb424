"""Who limited the load: the engine's slots (a real llama-server started with two slots, loaded
with four users), or nobody but someone else's traffic on the same engine (the simulator with a
second load beside the bench's)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.config import CostSettings
from monitor.cost.prices import PriceBook
from monitor.loadtest.data import load_dataset
from monitor.loadtest.load import Level
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.scenario import BUILT_IN
from monitor.loadtest.summary import engine_limited, shared, shortfalls, warnings
from monitor.sim import LatencyProfile
from monitor.sim.load import LoadConfig, run_load
from tests.loadtest.conftest import MODEL, bench
from tests.support.llamacpp import MODEL_NAME, LlamaServer, serve_tiny_model


@pytest.fixture(scope="module")
def two_slots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from serve_tiny_model(tmp_path_factory, "llama-two-slots", slots=2)


def test_four_users_on_two_slots_is_the_engines_limit_not_the_clients(two_slots: LlamaServer, prompts: Path) -> None:
    config = BenchConfig(target=two_slots.url, model=MODEL_NAME, scenario=BUILT_IN["chat"],
                         dataset=load_dataset(prompts), levels=[Level("concurrency", 4)], duration_s=2.5,
                         repeats=1, warmup=2, timeout_s=60.0, sample_interval_s=0.2)
    result = asyncio.run(run_bench(config, None, PriceBook(CostSettings())))
    server = result["conditions"]["server"]
    # The engine's configuration, from GET /props: two slots (and no local path of the model file).
    assert server["slots"] == 2 and server["config"]["props"]["total_slots"] == "2"
    assert "model_path" not in server["config"]["props"] and "props" not in server["errors"]
    engine = result["levels"][0]["repeats"][0]["engine"]
    # The slots filled and a queue formed behind them; the client held the four it was asked for.
    assert engine["requests_running"]["max"] == 2 and engine["requests_waiting"]["mean"] > 0
    assert result["levels"][0]["repeats"][0]["in_flight_mean"] > 2
    (line,) = engine_limited(result)
    assert line.startswith("c=4: the engine's slots were the limit: it ran at most 2 of its 2 slots")
    # Not the client's doing, and no one else's traffic.
    assert shortfalls(result) == [] and shared(result) == []
    assert not any("client limited" in w or "path to the engine" in w for w in warnings(result))


# Each request ~0.5 s in the engine: a second load of 20 requests a second keeps ~10 running.
SLOW = LatencyProfile(prefill_s=0.3, prefill_per_token_s=0.0, per_token_s=0.04, output_tokens=(6, 6), jitter=0.0)


def test_an_engine_that_carries_other_traffic_is_called_shared(start_sim, prompts: Path) -> None:
    server = start_sim(SLOW)
    alone = bench(server.url, prompts, levels=[Level("concurrency", 1)], duration_s=1.5, warmup=1,
                  sample_interval_s=0.2)
    assert shared(alone) == []

    other = threading.Thread(target=lambda: asyncio.run(run_load(server.url, LoadConfig(
        rps=20.0, duration_s=4.0, max_concurrency=32, stream_share=0.0, max_tokens=(6, 6), model=MODEL,
        drain_timeout_s=5.0))))
    other.start()
    try:
        busy = bench(server.url, prompts, levels=[Level("concurrency", 1)], duration_s=1.5, warmup=1,
                     sample_interval_s=0.2)
    finally:
        other.join(15.0)
    (line,) = shared(busy)
    assert line.startswith("c=1: the benchmark shared the engine: ")
    assert "while this client had 1.0 in flight" in line and "this client sent" in line


def test_without_a_slot_count_a_standing_queue_is_the_engines_batch_limit() -> None:
    def level(waiting: float, running: float) -> dict[str, object]:
        engine = {"requests_waiting": {"mean": {"mean": waiting, "n": 1}},
                  "requests_running": {"mean": {"mean": running, "n": 1}, "max": {"mean": 4.0, "n": 1}}}
        return {"level": {"kind": "concurrency", "value": 8, "label": "c=8"}, "repeats": [{}],
                "summary": {"engine": engine, "in_flight_mean": {"mean": 7.9, "n": 1}}}

    vllm = {"conditions": {"server": {"engine": "vllm", "slots": None}}, "levels": [level(3.6, 4.0)]}
    (line,) = engine_limited(vllm)
    assert line.startswith("c=8: the engine queued the load: 3.60 requests waiting on average beside 4.0 running")
    assert shortfalls(vllm) == []
    # A poll that caught one request queued for a moment is not a standing queue.
    assert engine_limited({**vllm, "levels": [level(0.1, 4.0)]}) == []
