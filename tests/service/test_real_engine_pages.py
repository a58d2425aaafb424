"""Golden numbers from pages the engines' own metric code wrote (tests/fixtures/real_engines/README.md).

vLLM 0.33.0 (two data-parallel engines) and SGLang 0.5.23 (two DP ranks) were fed a constant,
known load; `_t0` and `_t60` are two reads of the same server about a minute apart. The monitor
scrapes t0 and then t60 and every number on its /metrics page is checked twice:

- exactly, against the PromQL reference functions (tests' own `extrapolated_rate`,
  `histogram_quantile`) over the page values as prometheus_client's parser reads them;
- against the load that was fed (20 requests/s, 500 prompt and 100 generated tokens each, ...),
  within the slack of a real clock (the two reads were ~65 s apart, not exactly).
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Callable
from functools import cache

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.service.promql import extrapolated_rate, fraction_at_or_below, histogram_quantile
from tests.conftest import FIXTURES

PAGES = FIXTURES / "real_engines"
# Just longer than the ~65 s between the two reads: Prometheus then extrapolates each counter to
# the window's start by less than the time back to its zero, so rate() is the plain delta per second.
WINDOW = "65300ms"
WINDOW_SECONDS = 65.3
T0 = 1_767_300_000.0
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SGLANG_MODEL = "Qwen/Qwen3-8B"
Samples = dict[str, list[tuple[dict[str, str], float]]]
Keep = Callable[[dict[str, str]], bool]


@cache
def page(name: str) -> str:
    return (PAGES / name).read_text()


@cache
def samples_of(text: str) -> Samples:
    found: Samples = defaultdict(list)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            found[s.name].append((dict(s.labels), s.value))
    return found


def lora_timestamp(text: str) -> float:
    """vLLM's lora_requests_info holds the wall time of its last update: the read's clock."""
    ((_, value),) = samples_of(text)["vllm:lora_requests_info"]
    return value


def vllm_elapsed() -> float:
    # To the millisecond: the monitor keeps sample times in milliseconds, as Prometheus does.
    return round(lora_timestamp(page("vllm-0.33.0_t60.prom")) - lora_timestamp(page("vllm-0.33.0_t0.prom")), 3)


SGLANG_ELAPSED = 65.1  # no clock on SGLang's page: 1302 requests at the fed 20/s


def scrape_pair(first: str, second: str, elapsed: float, target: dict[str, str]) -> dict[str, float]:
    """The monitor's /metrics after scraping `first` at T0 and `second` `elapsed` seconds later."""
    texts = iter([page(first), page(second)])
    clock = [T0]
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {"windows": [WINDOW], "scrape_interval": "60s",
                                                "targets": [target]}})

    async def run() -> str:
        client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200, text=next(texts))))
        monitor = Monitor(settings, client=client, wall=lambda: clock[0])
        await monitor.run_once()
        clock[0] += elapsed
        await monitor.run_once()
        text = monitor.metrics_text().decode()
        await monitor.aclose()
        return text

    exported: dict[str, float] = {}
    for fam in text_string_to_metric_families(asyncio.run(run())):
        for s in fam.samples:
            if s.name.startswith("inference_") and not s.name.startswith("inference_monitor_"):
                exported[_key(s.name, dict(s.labels))] = s.value
    return exported


def _key(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f"{k}={labels[k]}" for k in sorted(labels)) + "}"


def reference_rate(name: str, first: str, second: str, elapsed: float, keep: Keep = lambda labels: True) -> float:
    """sum(rate(name[WINDOW])) at T0 + elapsed, per series first, as Prometheus evaluates it."""
    window = WINDOW_SECONDS
    end = T0 + elapsed
    before = {tuple(sorted(lab.items())): v for lab, v in samples_of(page(first))[name] if keep(lab)}
    after = {tuple(sorted(lab.items())): v for lab, v in samples_of(page(second))[name] if keep(lab)}
    total = 0.0
    for series, value in after.items():
        rate = extrapolated_rate([(T0, before.get(series, 0.0)), (end, value)], end - window, end)
        assert rate is not None
        total += rate
    return total


def reference_quantile(q: float, base: str, first: str, second: str) -> float:
    """histogram_quantile(q, sum by (le) (rate(base_bucket[WINDOW])))."""
    return histogram_quantile(q, bucket_rates(base, first, second))


def bucket_rates(base: str, first: str, second: str, keep: Keep = lambda labels: True) -> list[tuple[float, float]]:
    """sum by (le) (rate(base_bucket[WINDOW])): per series first (each extrapolates on its own)."""
    def buckets(text: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {tuple(sorted(lab.items())): v for lab, v in samples_of(text)[f"{base}_bucket"] if keep(lab)}

    window = WINDOW_SECONDS
    elapsed = vllm_elapsed() if first.startswith("vllm") else SGLANG_ELAPSED
    end = T0 + elapsed
    before, after = buckets(page(first)), buckets(page(second))
    per_le: dict[float, float] = defaultdict(float)
    for series, value in after.items():
        rate = extrapolated_rate([(T0, before.get(series, 0.0)), (end, value)], end - window, end)
        assert rate is not None
        per_le[float(dict(series)["le"])] += rate
    return sorted(per_le.items())


def close(actual: float, expected: float, rel: float) -> bool:
    return math.isclose(actual, expected, rel_tol=rel)


# --- vLLM 0.33.0 -----------------------------------------------------------------------------

VLLM_TARGET = {"name": "vllm", "url": "http://vllm/metrics"}


@pytest.fixture(scope="module")
def vllm() -> dict[str, float]:
    return scrape_pair("vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom", vllm_elapsed(), VLLM_TARGET)


def svc(name: str, **extra: str) -> str:
    return _key(name, {"target": "vllm", "model": VLLM_MODEL, "window": WINDOW, **extra})


VLLM_RATES = {
    # ours: (engine sample, fed per second over both engines)
    "inference_requests_per_second": ("vllm:request_success_total", 20.0),
    "inference_prompt_tokens_per_second": ("vllm:prompt_tokens_total", 20 * 500.0),
    "inference_generation_tokens_per_second": ("vllm:generation_tokens_total", 20 * 100.0),
    "inference_preemptions_per_second": ("vllm:num_preemptions_total", 2.0),
}


@pytest.mark.parametrize("ours", sorted(VLLM_RATES))
def test_vllm_rates_equal_promql_and_the_fed_load(vllm: dict[str, float], ours: str) -> None:
    sample, fed = VLLM_RATES[ours]
    exact = reference_rate(sample, "vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom", vllm_elapsed())
    assert vllm[svc(ours)] == pytest.approx(exact, rel=1e-6)
    assert close(vllm[svc(ours)], fed, 0.03), (ours, vllm[svc(ours)], fed)
    # One target serving the model: the fleet-wide number is the target's.
    assert vllm[_key(ours, {"model": VLLM_MODEL, "window": WINDOW})] == vllm[svc(ours)]


def test_vllm_error_ratio_is_the_worse_of_engine_and_http(vllm: dict[str, float]) -> None:
    args = ("vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom", vllm_elapsed())
    engine = reference_rate("vllm:request_success_total", *args, keep=lambda lab: lab["finished_reason"] == "error")
    requests = reference_rate("vllm:request_success_total", *args)
    http_5xx = reference_rate("http_requests_total", *args, keep=lambda lab: lab["status"] == "5xx")
    http_all = reference_rate("http_requests_total", *args)
    expected = max(engine / requests, http_5xx / http_all)
    assert vllm[svc("inference_request_error_ratio")] == pytest.approx(expected, rel=1e-6)
    # Fed: 1 in 10 finished with reason error, 1 in 10 HTTP requests answered 500.
    assert close(engine / requests, 0.1, 0.03) and close(http_5xx / http_all, 0.1, 0.05)


def test_vllm_gauges_are_the_fed_values(vllm: dict[str, float]) -> None:
    at = {"target": "vllm", "model": VLLM_MODEL}
    assert vllm[_key("inference_requests_running", at)] == 12 + 8
    # Waiting 3 / 2 for capacity, plus one request deferred on engine 0.
    assert vllm[_key("inference_requests_waiting", at)] == 4 + 2
    assert vllm[_key("inference_kv_cache_usage_ratio", at)] == 0.42  # the fuller engine
    assert vllm[_key("inference_target_up", {"target": "vllm"})] == 1.0
    assert vllm[_key("inference_target_info", {"target": "vllm", "engine": "vllm", "generation": "v1"})] == 1.0


# Fed values each histogram cycled over, and the metric that exports its quantiles.
VLLM_HISTOGRAMS = {
    "inference_ttft_seconds": ("vllm:time_to_first_token_seconds",
                               (0.03, 0.05, 0.07, 0.09, 0.15, 0.2, 0.3, 0.45, 0.6, 0.9)),
    "inference_tpot_seconds": ("vllm:request_time_per_output_token_seconds",
                               (0.012, 0.018, 0.022, 0.03, 0.04, 0.045, 0.06, 0.08, 0.12, 0.2)),
    "inference_e2e_latency_seconds": ("vllm:e2e_request_latency_seconds",
                                      (0.4, 0.6, 0.9, 1.2, 1.8, 2.2, 3.0, 4.5, 7.0, 12.0)),
    "inference_queue_time_seconds": ("vllm:request_queue_time_seconds",
                                     (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.6, 0.9, 1.2, 2.0)),
}


def bucket_bounds(text: str, base: str) -> list[float]:
    return sorted({float(lab["le"]) for lab, _ in samples_of(text)[f"{base}_bucket"]})


def bracket(value: float, bounds: list[float]) -> tuple[float, float]:
    """The classic bucket (lower, upper] that holds `value`."""
    lower = 0.0
    for upper in bounds:
        if value <= upper:
            return lower, upper
        lower = upper
    return lower, math.inf


@pytest.mark.parametrize("ours", sorted(VLLM_HISTOGRAMS))
@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_vllm_quantiles_equal_promql_and_fall_in_the_fed_bucket(vllm: dict[str, float], ours: str, q: float) -> None:
    base, fed = VLLM_HISTOGRAMS[ours]
    exact = reference_quantile(q, base, "vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom")
    got = vllm[svc(ours, quantile=f"{q:g}")]
    assert got == pytest.approx(exact, rel=1e-9)
    # The fed values cycle evenly: the q-th of them lies in the bucket the quantile interpolates in.
    true = sorted(fed)[min(len(fed) - 1, math.ceil(q * len(fed)) - 1)]
    lower, upper = bracket(true, bucket_bounds(page("vllm-0.33.0_t60.prom"), base))
    assert lower <= got <= upper, (ours, q, got, (lower, upper))


def test_vllm_slo_attainment_equals_promql_and_brackets_the_fed_share(vllm: dict[str, float]) -> None:
    # Objectives 200 ms TTFT, 50 ms TPOT (the defaults); interpolated inside the bucket holding them.
    for objective, seconds in (("ttft", 0.2), ("tpot", 0.05)):
        ours = f"inference_{objective}_seconds"
        base, fed = VLLM_HISTOGRAMS[ours]
        rates = bucket_rates(base, "vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom")
        share = vllm[svc("inference_slo_attainment_ratio", objective=objective)]
        assert share == pytest.approx(fraction_at_or_below(seconds, rates), rel=1e-9)
        lower, upper = bracket(seconds, [le for le, _ in rates])
        within = [sum(v <= bound for v in fed) / len(fed) for bound in (lower, upper)]
        # Buckets first seen empty extrapolate less than the others: a hair of slack.
        assert within[0] * 0.99 <= share <= within[1] * 1.01, (objective, share, within)


def test_vllm_multiprocess_page_reads_the_same_gauges() -> None:
    one = page("vllm-0.33.0-multiprocess_t60.prom")
    exported = scrape_pair("vllm-0.33.0-multiprocess_t60.prom", "vllm-0.33.0-multiprocess_t60.prom", 15.0,
                           VLLM_TARGET)
    at = {"target": "vllm", "model": VLLM_MODEL}
    assert exported[_key("inference_requests_running", at)] == 20
    assert exported[_key("inference_requests_waiting", at)] == 6
    assert exported[_key("inference_kv_cache_usage_ratio", at)] == 0.42
    assert exported[svc("inference_requests_per_second")] == 0.0  # the same page twice: nothing finished
    assert "vllm:num_requests_running" in samples_of(one)


# --- SGLang 0.5.23 ---------------------------------------------------------------------------

SGLANG_TARGET = {"name": "sglang", "url": "http://sglang/metrics"}


@pytest.fixture(scope="module")
def sglang() -> dict[str, float]:
    return scrape_pair("sglang-0.5.23_t0.prom", "sglang-0.5.23_t60.prom", SGLANG_ELAPSED, SGLANG_TARGET)


def sg(name: str, **extra: str) -> str:
    return _key(name, {"target": "sglang", "model": SGLANG_MODEL, "window": WINDOW, **extra})


SGLANG_RATES = {
    # num_requests_total counts every finished request, aborted ones included (1 in 10 fed).
    "inference_requests_per_second": ("sglang:num_requests_total", 20.0),
    "inference_prompt_tokens_per_second": ("sglang:prompt_tokens_total", 20 * 500.0),
    "inference_generation_tokens_per_second": ("sglang:generation_tokens_total", 20 * 100.0),
    "inference_preemptions_per_second": ("sglang:num_retracted_requests_total", 2.0),
}


@pytest.mark.parametrize("ours", sorted(SGLANG_RATES))
def test_sglang_rates_equal_promql_and_the_fed_load(sglang: dict[str, float], ours: str) -> None:
    sample, fed = SGLANG_RATES[ours]
    exact = reference_rate(sample, "sglang-0.5.23_t0.prom", "sglang-0.5.23_t60.prom", SGLANG_ELAPSED)
    assert sglang[sg(ours)] == pytest.approx(exact, rel=1e-6)
    assert close(sglang[sg(ours)], fed, 0.03), (ours, sglang[sg(ours)], fed)


def test_sglang_gauges_are_the_fed_values(sglang: dict[str, float]) -> None:
    at = {"target": "sglang", "model": SGLANG_MODEL}
    assert sglang[_key("inference_requests_running", at)] == 12 + 8
    assert sglang[_key("inference_requests_waiting", at)] == 3 + 2
    assert sglang[_key("inference_kv_cache_usage_ratio", at)] == 0.42


SGLANG_HISTOGRAMS = {
    "inference_ttft_seconds": ("sglang:time_to_first_token_seconds",
                               (0.15, 0.25, 0.35, 0.5, 0.7, 0.9, 1.5, 3.0, 5.0, 9.0)),
    "inference_queue_time_seconds": ("sglang:queue_time_seconds",
                                     (0.0005, 0.003, 0.008, 0.03, 0.08, 0.15, 0.3, 0.7, 1.5, 2.5)),
}


@pytest.mark.parametrize("ours", sorted(SGLANG_HISTOGRAMS))
@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_sglang_quantiles_equal_promql_and_fall_in_the_fed_bucket(sglang: dict[str, float], ours: str,
                                                                  q: float) -> None:
    base, fed = SGLANG_HISTOGRAMS[ours]
    exact = reference_quantile(q, base, "sglang-0.5.23_t0.prom", "sglang-0.5.23_t60.prom")
    got = sglang[sg(ours, quantile=f"{q:g}")]
    assert got == pytest.approx(exact, rel=1e-9)
    # The ranks split the fed values over streaming / non-streaming series unevenly: only the range.
    bounds = bucket_bounds(page("sglang-0.5.23_t60.prom"), base)
    assert bracket(min(fed), bounds)[0] <= got <= bracket(max(fed), bounds)[1]
