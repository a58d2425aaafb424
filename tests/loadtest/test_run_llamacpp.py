"""`infermon bench` against a real llama.cpp llama-server (tests/support/llamacpp.py), not the simulator.

The server is llama.cpp's own OpenAI-compatible streaming API and `/metrics` code with a tiny
random-weight model: what the bench records about the engine comes from that page, and what it
counts as generated must be what the server itself counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import CostSettings
from monitor.cost.prices import PriceBook
from monitor.loadtest.data import Dataset, draw_requests, load_dataset, synthetic_dataset
from monitor.loadtest.load import Level
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.scenario import BUILT_IN
from monitor.loadtest.stats import distribution
from monitor.loadtest.summary import cached
from monitor.loadtest.tokenizer import exact_input_lengths
from tests.support.llamacpp import MODEL_NAME, LlamaServer, serve_tiny_model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from serve_tiny_model(tmp_path_factory, "llama-bench")


def _predicted(server: LlamaServer) -> float:
    for family in text_string_to_metric_families(server.metrics()):
        for sample in family.samples:
            if sample.name == "llamacpp:tokens_predicted_total":
                return float(sample.value)
    raise AssertionError("llamacpp:tokens_predicted_total is not on the page")


def test_a_bench_run_against_llama_server_measures_what_the_server_served(server: LlamaServer,
                                                                          prompts: Path) -> None:
    before = _predicted(server)
    config = BenchConfig(target=server.url, model=MODEL_NAME, scenario=BUILT_IN["chat"],
                         dataset=load_dataset(prompts), levels=[Level("concurrency", 1)],
                         duration_s=2.0, repeats=1, warmup=1, timeout_s=60.0)
    result = asyncio.run(run_bench(config, None, PriceBook(CostSettings())))
    served = _predicted(server) - before

    server_conditions = result["conditions"]["server"]
    assert server_conditions["engine"] == "llamacpp"  # detected from llama.cpp's own page
    assert MODEL_NAME in server_conditions["models"]  # its GET /v1/models
    assert result["warmup"]["requests"] == 1 and result["warmup"]["excluded"]  # (its answer may end early too)
    window = result["levels"][0]["repeats"][0]
    # The random-weight model now and then ends an answer before its first token (1 in 71 seen
    # beside two CPU hogs): the bench counts that answer as failed, as the canary does. Nothing
    # else may fail, and most answers do not end so.
    outcomes, reasons = window["outcomes"], window["failure_reasons"]
    assert window["failed"] == outcomes.get("empty_answer", 0) < window["requests"] / 2, (outcomes, reasons)
    # Tokens come from each answer's `usage`; the server's counter also holds the warm-up's.
    assert 0 < window["output_tokens"] <= served
    ttft, e2e = window["ttft_s"], window["e2e_s"]
    assert 0 < ttft["p50"] <= e2e["p50"] and ttft["p50"] <= ttft["p99"]


def test_unique_synthetic_prompts_leave_llama_servers_prompt_cache_unused(server: LlamaServer, tmp_path: Path) -> None:
    def run(dataset: Dataset) -> dict[str, Any]:
        config = BenchConfig(target=server.url, model=MODEL_NAME, scenario=BUILT_IN["chat"], dataset=dataset,
                             levels=[Level("concurrency", 1)], duration_s=2.0, repeats=1, warmup=1, timeout_s=60.0)
        return asyncio.run(run_bench(config, None, PriceBook(CostSettings())))

    # A new prompt every request: only the chat template's opening tokens are ever found in the cache.
    fresh = run(synthetic_dataset(BUILT_IN["chat"]))
    window = fresh["levels"][0]["repeats"][0]
    assert window["requests"] >= 2
    assert window["engine"]["prefix_cache_hit_ratio"] < 0.05, window["engine"]
    assert cached(fresh) == []
    # One prompt sent again and again (the pitfall of a small prompt pool): the server reuses it, the result says so.
    (tmp_path / "one.jsonl").write_text('{"prompt": "' + "tell me about the river and the garden " * 20 + '"}\n')
    repeated = run(load_dataset(tmp_path / "one.jsonl"))
    assert repeated["levels"][0]["repeats"][0]["engine"]["prefix_cache_hit_ratio"] > 0.5
    (line,) = cached(repeated)
    assert "came from the engine's prefix cache" in line


def test_input_lengths_by_llama_servers_tokenizer_are_what_its_usage_counts(server: LlamaServer, prompts: Path) -> None:
    requests = draw_requests(load_dataset(prompts), BUILT_IN["chat"], 6, seed=3)

    async def both() -> tuple[dict[str, Any] | None, list[int]]:
        async with httpx.AsyncClient(timeout=30.0) as http:
            exact = await exact_input_lengths(http, server.url, MODEL_NAME, "llamacpp", requests)
            counted = []
            for request in requests:  # what the server counts when it serves the same messages
                answer = await http.post(f"{server.url}/v1/chat/completions", json={
                    "model": MODEL_NAME, "messages": list(request.messages), "max_tokens": 1})
                counted.append(answer.json()["usage"]["prompt_tokens"])
            return exact, counted

    exact, counted = asyncio.run(both())
    assert exact is not None and exact["requests"] == 6 and "apply-template" in exact["from"]
    assert exact["input_tokens"] == distribution(counted)
    # The client's estimate (4 characters a token) is not that count on this model's vocabulary.
    assert distribution([r.input_tokens for r in requests])["mean"] != exact["input_tokens"]["mean"]
    # An engine without a tokenizer endpoint we know: not tried.
    assert asyncio.run(_untried(server.url, requests)) is None


async def _untried(url: str, requests: Any) -> dict[str, Any] | None:
    async with httpx.AsyncClient(timeout=30.0) as http:
        return await exact_input_lengths(http, url, MODEL_NAME, "tgi", requests)
