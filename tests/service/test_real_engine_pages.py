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
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.service.promql import fraction_at_or_below, histogram_quantile
from tests.conftest import FIXTURES
from tests.support.pageserver import Page, PageServer
from tests.support.promql_oracle import extrapolated_rate

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


def text_of(name_or_text: str) -> str:
    """A fixture page by name, or a page's text as is."""
    return page(name_or_text) if name_or_text.endswith(".prom") else name_or_text


def scrape_pair(first: str, second: str, elapsed: float, target: dict[str, str]) -> dict[str, float]:
    """The monitor's /metrics after scraping `first` at T0 and `second` `elapsed` seconds later."""
    return scrape_texts(page(first), page(second), elapsed, target)


def scrape_texts(first: str, second: str, elapsed: float, target: dict[str, str]) -> dict[str, float]:
    texts = iter([first, second])
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
    before = {tuple(sorted(lab.items())): v for lab, v in samples_of(text_of(first))[name] if keep(lab)}
    after = {tuple(sorted(lab.items())): v for lab, v in samples_of(text_of(second))[name] if keep(lab)}
    total = 0.0
    for series, value in after.items():
        if series not in before:
            continue  # one sample in the window: rate() has none (a series the load created later)
        rate = extrapolated_rate([(T0, before[series]), (end, value)], end - window, end)
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
    # The stub's HTTP series were created after t0: no HTTP rate over t0 -> t60, the engine's ratio.
    assert reference_rate("http_requests_total", *args) == 0.0
    assert vllm[svc("inference_request_error_ratio")] == pytest.approx(engine / requests, rel=1e-6)
    assert close(engine / requests, 0.1, 0.03)  # fed: 1 in 10 finished with reason error
    # The minute after (the same load continued), the HTTP layer's ratio (1 in 10 answered 500) too.
    later = continued("vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom")
    exported = scrape_texts(page("vllm-0.33.0_t60.prom"), later, vllm_elapsed(), VLLM_TARGET)
    args = ("vllm-0.33.0_t60.prom", later, vllm_elapsed())
    http_5xx = reference_rate("http_requests_total", *args, keep=lambda lab: lab["status"] == "5xx")
    http_all = reference_rate("http_requests_total", *args)
    engine = reference_rate("vllm:request_success_total", *args, keep=lambda lab: lab["finished_reason"] == "error")
    requests = reference_rate("vllm:request_success_total", *args)
    assert close(http_5xx / http_all, 0.1, 0.06)
    expected = max(engine / requests, http_5xx / http_all)
    assert exported[svc("inference_request_error_ratio")] == pytest.approx(expected, rel=1e-6)


def test_vllm_aborts_are_the_finished_reason_abort(vllm: dict[str, float]) -> None:
    args = ("vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom", vllm_elapsed())
    exact = reference_rate("vllm:request_success_total", *args, keep=lambda lab: lab["finished_reason"] == "abort")
    assert vllm[svc("inference_aborted_requests_per_second")] == pytest.approx(exact, rel=1e-6)
    assert close(exact, 2.0, 0.03)  # 1 in 10 of the 20 requests/s


def test_vllm_gauges_are_the_fed_values(vllm: dict[str, float]) -> None:
    at = {"target": "vllm", "model": VLLM_MODEL}
    assert vllm[_key("inference_requests_running", at)] == 12 + 8
    # Waiting 3 / 2 for capacity, plus one request deferred on engine 0.
    assert vllm[_key("inference_requests_waiting", at)] == 4 + 2
    assert vllm[_key("inference_kv_cache_usage_ratio", at)] == 0.42  # the fuller engine
    assert vllm[_key("inference_target_up", {"target": "vllm"})] == 1.0
    assert vllm[_key("inference_target_info", {"target": "vllm", "engine": "vllm", "generation": "v1"})] == 1.0


def test_vllm_per_rank_numbers_waiting_reasons_sleep_and_lora(vllm: dict[str, float]) -> None:
    at = {"target": "vllm", "model": VLLM_MODEL}
    for rank, (running, waiting, kv) in {"0": (12, 4, 0.42), "1": (8, 2, 0.37)}.items():
        assert vllm[_key("inference_rank_requests_running", {**at, "rank": rank})] == running
        assert vllm[_key("inference_rank_requests_waiting", {**at, "rank": rank})] == waiting
        assert vllm[_key("inference_rank_kv_cache_usage_ratio", {**at, "rank": rank})] == kv
    # Load 16 and 10 requests: the busier rank over the mean of both.
    assert vllm[_key("inference_rank_imbalance_ratio", at)] == pytest.approx(16 / 13)
    # Waiting 3 / 2 for capacity, one request deferred on engine 0: the same 6 as the total.
    assert vllm[_key("inference_requests_waiting_by_reason", {**at, "reason": "capacity"})] == 3 + 2
    assert vllm[_key("inference_requests_waiting_by_reason", {**at, "reason": "deferred"})] == 1
    assert vllm[_key("inference_engine_sleep_state", {**at, "state": "awake"})] == 2  # both engines
    assert vllm[_key("inference_engine_sleep_state", {**at, "state": "weights_offloaded"})] == 0
    assert vllm[_key("inference_engines_sleeping", at)] == 0
    # One adapter `sql-lora` running, none waiting, --max-loras 4: from the newest info series.
    assert vllm[_key("inference_lora_adapters", {"target": "vllm", "state": "running"})] == 1
    assert vllm[_key("inference_lora_adapters", {"target": "vllm", "state": "waiting"})] == 0
    assert vllm[_key("inference_lora_adapters_max", {"target": "vllm"})] == 4


def test_vllm_sleeping_engines_and_the_newest_lora_series_count() -> None:
    """One engine put to sleep (level 1: weights offloaded), and a newer LoRA info series with an
    adapter waiting: the newest series is the state now, the older ones history."""
    text = page("vllm-0.33.0_t60.prom")
    asleep = text.replace('engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="awake"} 1.0',
                          'engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="awake"} 0.0')
    asleep = asleep.replace(
        'engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="weights_offloaded"} 0.0',
        'engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="weights_offloaded"} 1.0')
    ((_, stamp),) = samples_of(text)["vllm:lora_requests_info"]
    newer = (f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="sql-lora,chat-lora",'
             f'waiting_lora_adapters="code-lora"}} {stamp + 5}\n')
    asleep = asleep.replace("# TYPE vllm:lora_requests_info gauge\n", "# TYPE vllm:lora_requests_info gauge\n" + newer)
    assert asleep.count("vllm:lora_requests_info{") == 2
    exported = scrape_texts(text, asleep, 15.0, VLLM_TARGET)
    at = {"target": "vllm", "model": VLLM_MODEL}
    assert exported[_key("inference_engines_sleeping", at)] == 1
    assert exported[_key("inference_engine_sleep_state", {**at, "state": "weights_offloaded"})] == 1
    assert exported[_key("inference_lora_adapters", {"target": "vllm", "state": "running"})] == 2
    assert exported[_key("inference_lora_adapters", {"target": "vllm", "state": "waiting"})] == 1


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


def continued(first: str, second: str) -> str:
    """`second` a further `elapsed` later under the same constant load: every counter-like sample
    grows again by what it grew from `first` (from 0 for a series `first` did not have yet)."""
    before = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in page(first).splitlines()
              if line and not line.startswith("#")}
    lines = []
    for line in page(second).splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{", 1)[0]
            if name.endswith(("_total", "_bucket", "_count", "_sum")):
                line = f"{series} {2 * float(value) - before.get(series, 0.0)!r}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_sglang_error_ratio_is_its_http_5xx_share() -> None:
    """SGLang counts no engine errors: its API's 500s (sglang:http_responses_total) are the errors.

    Its /v1 response series appear only after t0 (the first request created them): a rate needs
    two samples, so the pair t0 -> t60 has none, in Prometheus as here. t60 -> the minute after
    (the same load continued) has."""
    later = continued("sglang-0.5.23_t0.prom", "sglang-0.5.23_t60.prom")
    exported = scrape_texts(page("sglang-0.5.23_t60.prom"), later, SGLANG_ELAPSED, SGLANG_TARGET)
    assert sg("inference_request_error_ratio") not in scrape_pair(
        "sglang-0.5.23_t0.prom", "sglang-0.5.23_t60.prom", SGLANG_ELAPSED, SGLANG_TARGET)
    sglang = exported
    args = ("sglang-0.5.23_t60.prom", later, SGLANG_ELAPSED)

    def api(lab: dict[str, str]) -> bool:
        return lab["endpoint"].startswith("/v1/")

    def api_500(lab: dict[str, str]) -> bool:
        return api(lab) and lab["status_code"] == "500"

    errors = reference_rate("sglang:http_responses_total", *args, keep=api_500)
    every = reference_rate("sglang:http_responses_total", *args, keep=api)
    assert sglang[sg("inference_request_error_ratio")] == pytest.approx(errors / every, rel=1e-6)
    assert close(errors / every, 0.106, 0.01)  # the fixture's ~1 in 10 answered 500


def test_sglang_aborts_and_prefix_cache(sglang: dict[str, float]) -> None:
    args = ("sglang-0.5.23_t0.prom", "sglang-0.5.23_t60.prom", SGLANG_ELAPSED)
    aborts = reference_rate("sglang:num_aborted_requests_total", *args)
    assert sglang[sg("inference_aborted_requests_per_second")] == pytest.approx(aborts, rel=1e-6)
    assert close(aborts, 2.0, 0.03)  # finish reasons 8 x stop, length, abort
    hits = reference_rate("sglang:cached_tokens_total", *args)
    lookups = reference_rate("sglang:prompt_tokens_total", *args)
    assert sglang[sg("inference_prefix_cache_hit_ratio")] == pytest.approx(hits / lookups, rel=1e-6)
    assert close(hits / lookups, 0.4, 0.01)  # the page's own sglang:cache_hit_rate gauge says 0.4


def test_sglang_tpot_is_the_per_request_histogram(sglang: dict[str, float]) -> None:
    exact = reference_quantile(0.5, "sglang:request_time_per_output_token_seconds", "sglang-0.5.23_t0.prom",
                               "sglang-0.5.23_t60.prom")
    assert sglang[sg("inference_tpot_seconds", quantile="0.5")] == pytest.approx(exact, rel=1e-6)


def test_vllm_prefix_cache_hit_ratio(vllm: dict[str, float]) -> None:
    args = ("vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom", vllm_elapsed())
    hits = reference_rate("vllm:prefix_cache_hits_total", *args)
    lookups = reference_rate("vllm:prefix_cache_queries_total", *args)
    assert vllm[svc("inference_prefix_cache_hit_ratio")] == pytest.approx(hits / lookups, rel=1e-6)
    assert close(hits / lookups, 0.4, 0.01)  # 200 of 500 prompt tokens per tick hit


def test_sglang_gauges_are_the_fed_values(sglang: dict[str, float]) -> None:
    at = {"target": "sglang", "model": SGLANG_MODEL}
    assert sglang[_key("inference_requests_running", at)] == 12 + 8
    assert sglang[_key("inference_requests_waiting", at)] == 3 + 2
    assert sglang[_key("inference_kv_cache_usage_ratio", at)] == 0.42


def test_sglang_per_rank_numbers_and_its_own_acceptance(sglang: dict[str, float]) -> None:
    at = {"target": "sglang", "model": SGLANG_MODEL}
    for rank, (running, waiting, kv) in {"0": (12, 3, 0.42), "1": (8, 2, 0.37)}.items():
        assert sglang[_key("inference_rank_requests_running", {**at, "rank": rank})] == running
        assert sglang[_key("inference_rank_requests_waiting", {**at, "rank": rank})] == waiting
        assert sglang[_key("inference_rank_kv_cache_usage_ratio", {**at, "rank": rank})] == kv
    assert sglang[_key("inference_rank_imbalance_ratio", at)] == pytest.approx(15 / 12.5)
    # SGLang's own per-interval gauges, the same on both ranks: their mean.
    assert sglang[_key("inference_spec_decode_engine_acceptance_length", at)] == pytest.approx(2.8)
    assert sglang[_key("inference_spec_decode_engine_acceptance_ratio", at)] == pytest.approx(0.6)
    assert not any(k.startswith(("inference_lora_adapters", "inference_engines_sleeping")) for k in sglang)


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


# --- llama.cpp llama-server ------------------------------------------------------------------

LLAMA_TARGET = {"name": "edge", "url": "http://edge/metrics", "model": "tiny-llama"}
LLAMA_PAGE = "llama.cpp-server_metrics.prom"


def llama_later(elapsed: float) -> str:
    """The page `elapsed` s later: every counter grown by a tenth, the *_tokens_seconds gauges
    (throughput since the previous read) set to nonsense: no number may move with them."""
    grown = []
    for line in page(LLAMA_PAGE).splitlines():
        if line.startswith("llamacpp:"):
            name, value = line.split(" ")
            if name.endswith("_tokens_seconds"):
                line = f"{name} 1e9"
            elif name.endswith("_total"):
                line = f"{name} {float(value) * 1.1!r}"
        grown.append(line)
    return "\n".join(grown) + "\n"


def test_llamacpp_numbers_come_from_its_counters_and_the_target_model() -> None:
    texts = iter([page(LLAMA_PAGE), llama_later(60.0)])
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {"windows": [WINDOW], "scrape_interval": "60s",
                                                "targets": [LLAMA_TARGET]}})
    clock = [T0]

    async def run() -> tuple[str, list[dict[str, object]]]:
        client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200, text=next(texts))))
        monitor = Monitor(settings, client=client, wall=lambda: clock[0])
        await monitor.run_once()
        clock[0] += 60.0
        await monitor.run_once()
        text, status = monitor.metrics_text().decode(), monitor.service.status()
        await monitor.aclose()
        return text, status

    text, status = asyncio.run(run())
    got = {_key(s.name, dict(s.labels)): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    first = _llama_counters(page(LLAMA_PAGE))
    grown = {name: value * 0.1 for name, value in first.items()}  # the increase over the minute

    def ed(name: str) -> str:
        return _key(name, {"target": "edge", "model": "tiny-llama", "window": WINDOW})

    def per_second(name: str) -> float:
        end = T0 + 60.0
        rate = extrapolated_rate([(T0, first[name]), (end, first[name] * 1.1)], end - WINDOW_SECONDS, end)
        assert rate is not None
        return rate

    computed, cached = "llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"
    assert got[ed("inference_prompt_tokens_per_second")] == pytest.approx(per_second(computed) + per_second(cached))
    assert got[ed("inference_generation_tokens_per_second")] == pytest.approx(
        per_second("llamacpp:tokens_predicted_total"))
    assert got[ed("inference_prefix_cache_hit_ratio")] == pytest.approx(
        grown[cached] / (grown[cached] + grown[computed]))
    assert got[ed("inference_prompt_seconds_per_token")] == pytest.approx(
        grown["llamacpp:prompt_seconds_total"] / grown[computed])
    assert got[ed("inference_generation_seconds_per_token")] == pytest.approx(
        grown["llamacpp:tokens_predicted_seconds_total"] / grown["llamacpp:tokens_predicted_total"])
    assert got[_key("inference_requests_running", {"target": "edge", "model": "tiny-llama"})] == 0.0
    assert got[_key("inference_requests_waiting", {"target": "edge", "model": "tiny-llama"})] == 0.0
    # No request counter, no errors, no histograms: absent, never 0.
    for absent in ("inference_requests_per_second", "inference_request_error_ratio", "inference_ttft_seconds",
                   "inference_tpot_seconds", "inference_kv_cache_usage_ratio"):
        assert not any(key.startswith(absent + "{") and "target=edge" in key for key in got), absent
    (row,) = status
    assert row["up"] and row["engine"] == "llamacpp" and row["models"] == ["tiny-llama"]
    assert row["absent"] == ["requests", "errors", "ttft", "tpot", "e2e", "queue"]
    assert "canary" in str(row["note"]) and "error ratio" in str(row["note"])


def _llama_counters(text: str) -> dict[str, float]:
    return {name: value for name, ((_, value),) in
            ((n, samples) for n, samples in samples_of(text).items() if n.endswith("_total"))}


@pytest.mark.parametrize("ours, base", [
    ("inference_prefill_time_seconds", "vllm:request_prefill_time_seconds"),
    ("inference_decode_time_seconds", "vllm:request_decode_time_seconds"),
    ("inference_request_inference_time_seconds", "vllm:request_inference_time_seconds"),
])
@pytest.mark.parametrize("q", [0.5, 0.99])
def test_vllm_request_phase_quantiles_equal_promql(vllm: dict[str, float], ours: str, base: str, q: float) -> None:
    exact = reference_quantile(q, base, "vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom")
    assert vllm[svc(ours, quantile=f"{q:g}")] == pytest.approx(exact, rel=1e-6)


def test_vllm_speculative_decoding_acceptance(vllm: dict[str, float]) -> None:
    args = ("vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom", vllm_elapsed())
    drafts = reference_rate("vllm:spec_decode_num_drafts_total", *args)
    proposed = reference_rate("vllm:spec_decode_num_draft_tokens_total", *args)
    accepted = reference_rate("vllm:spec_decode_num_accepted_tokens_total", *args)
    assert vllm[svc("inference_spec_decode_acceptance_ratio")] == pytest.approx(accepted / proposed, rel=1e-6)
    assert vllm[svc("inference_spec_decode_acceptance_length")] == pytest.approx(1 + accepted / drafts, rel=1e-6)
    # Fed per tick: 10 drafts, 30 draft tokens, 18 accepted.
    assert close(accepted / proposed, 0.6, 0.01) and close(1 + accepted / drafts, 2.8, 0.01)


def test_vllm_speculative_decoding_acceptance_per_position(vllm: dict[str, float]) -> None:
    args = ("vllm-0.33.0_t0.prom", "vllm-0.33.0_t60.prom", vllm_elapsed())
    drafts = reference_rate("vllm:spec_decode_num_drafts_total", *args)
    for position, fed in {"0": 8, "1": 6, "2": 4}.items():
        accepted = reference_rate("vllm:spec_decode_num_accepted_tokens_per_pos_total", *args,
                                  keep=lambda labels, p=position: labels.get("position") == p)  # type: ignore[misc]
        got = vllm[svc("inference_spec_decode_position_acceptance_ratio", position=position)]
        assert got == pytest.approx(accepted / drafts, rel=1e-6)
        assert close(got, fed / 10, 0.01)  # fed per tick: 10 drafts, (8, 6, 4) accepted at positions 0, 1, 2
    assert not any("position=\"3\"" in key for key in vllm)


def test_a_llamacpp_target_without_a_model_is_told_to_name_one() -> None:
    """llama.cpp's page names no model: without the target's `model:` its numbers are under
    "unknown", and `check`'s and the overview's note says which key to set; with it, no such note."""
    notes = {}
    with PageServer() as server:
        server.set("/metrics", Page(page(LLAMA_PAGE)))
        for name, model in (("bare", None), ("named", "tiny-llama")):
            target = {"name": name, "url": server.url("/metrics"), **({"model": model} if model else {})}
            settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                            "service": {"targets": [target]}})

            async def run(settings: Any = settings) -> tuple[str, list[dict[str, object]]]:
                monitor = Monitor(settings)
                try:
                    await monitor.run_once()
                    return monitor.metrics_text().decode(), monitor.service.status()
                finally:
                    await monitor.aclose()

            text, (row,) = asyncio.run(run())
            assert row["up"] and row["engine"] == "llamacpp", row
            notes[name] = str(row["note"])
            running = [dict(s.labels) for f in text_string_to_metric_families(text) for s in f.samples
                       if s.name == "inference_requests_running"]
            assert running == [{"target": name, "model": model or "unknown"}], running
    assert "the page names no model: set the target's `model:`" in notes["bare"]
    assert "names no model" not in notes["named"] and "canary" in notes["named"]
