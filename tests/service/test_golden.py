"""A golden /metrics page for a fixed scenario; regenerate with UPDATE_GOLDEN=1."""

import asyncio

import httpx

from monitor.catalog import CATALOG
from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.conftest import FIXTURES
from tests.service.pagegen import grow
from tests.support.golden import assert_golden, assert_promtool_accepts, emitted_families

GOLDEN = FIXTURES / "golden_service.prom"


def scenario_page() -> str:
    base = (FIXTURES / "sample_vllm_v1.prom").read_text()
    # llama.cpp with a draft model: its speculative-decoding counters are no longer 0.
    llama = (FIXTURES / "pages" / "llamacpp.prom").read_text()
    for name, value in (("draft_tokens", 400), ("accepted_tokens", 300), ("drafts", 100)):
        sample = f"llamacpp:spec_decode_num_{name}_total"
        llama = llama.replace(f"{sample} 0\n", f"{sample} {value}\n")
    # The pages vLLM 0.33's and SGLang 0.5.23's own code wrote: per-rank numbers, waiting reasons,
    # sleep states, LoRA adapters, SGLang's own acceptance gauges.
    real = FIXTURES / "real_engines"
    pages = {"dp": ((real / "vllm-0.33.0_t60.prom").read_text(), "vllm:",
                    ("_created", "num_requests", "perc", "info", "sleep_state", "spec_decode_num_accepted_tokens_per")),
             "sg": ((real / "sglang-0.5.23_t60.prom").read_text(), "sglang:",
                    ("num_running", "num_queue", "token_usage", "spec_accept", "_created")),
             # KV-cache tiers, P/D and MoE balance (tests/fixtures/tiers/README.md)
             "st": ((FIXTURES / "tiers" / "sglang_hicache_pd_eplb.prom").read_text(), "sglang:",
                    ("num_running", "num_queue", "token_usage", "hicache_host")),
             "vt": ((FIXTURES / "tiers" / "vllm_offload_nixl.prom").read_text(), "vllm:", ("perc",))}
    scrapes = {"a": 0, "b": 0, "llama": 0, "dp": 0, "sg": 0, "st": 0, "vt": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        target = request.url.host
        scrapes[target] += 1
        factor = 1 + 0.1 * scrapes[target] * (2 if target == "b" else 1)
        if target == "llama":  # llama.cpp's counters only; its gauges stay
            gauges = ("tokens_seconds", "requests_", "slots", "n_tokens_max")
            return httpx.Response(200, text=grow(llama, factor, skip=gauges, prefix="llamacpp:"))
        if target in pages:
            text, prefix, skip = pages[target]
            return httpx.Response(200, text=grow(text, factor, skip=skip, prefix=prefix))
        return httpx.Response(200, text=grow(base, factor))

    clock = [1_767_300_000.0]
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {
        # A baseline the 60 s of scrapes cover for the 30s window (>= 90 %), not for the 1m one.
        "windows": ["30s", "1m"], "baseline_window": "30s",
        "targets": [{"name": "vllm-a", "url": "http://a/metrics"}, {"name": "vllm-b", "url": "http://b/metrics"},
                    {"name": "llama-edge", "url": "http://llama/metrics", "model": "tiny-llama"},
                    {"name": "vllm-dp", "url": "http://dp/metrics"}, {"name": "sglang-dp", "url": "http://sg/metrics"},
                    {"name": "sglang-tiers", "url": "http://st/metrics"}, {"name": "vllm-tiers", "url": "http://vt/metrics"}],
    }})

    async def run() -> str:
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        monitor = Monitor(settings, client=client, wall=lambda: clock[0])
        for job in monitor.jobs:  # as the app does for what it schedules: the jobs' progress is exported
            if job.cron is None:
                monitor.health.watch(job.name, job.interval_seconds)
        for _ in range(5):
            await monitor.run_once()
            clock[0] += 15.0
        # Durations are wall-clock measurements: pin them for a stable page.
        for entry in monitor.health.entries.values():
            entry.duration_seconds = 0.01
        text = monitor.metrics_text().decode()
        await monitor.aclose()
        return text

    return asyncio.run(run())


def test_golden_page_unchanged() -> None:
    assert_golden(GOLDEN, scenario_page())


def test_golden_page_passes_promtool() -> None:
    assert_promtool_accepts(GOLDEN)


def test_emitted_families_equal_the_catalog() -> None:
    emitted = emitted_families(GOLDEN)
    expected = {name for name, d in CATALOG.items() if d.layer in ("service", "self", "store")}
    assert emitted == expected
