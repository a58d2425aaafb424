"""Legal but awkward pages, served by a real loopback server: the target stays up, the numbers stay right.

Each test serves a sequence of small vLLM V1 pages (one per scrape, 15 s apart on an injected
clock, so every number is exact) and compares what /metrics exports with either a value worked
out by hand with Prometheus' rules or the numbers of the same data on a plain page.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, replace
from typing import Any

import pytest

from monitor.config import load_settings
from monitor.promtext import parse
from monitor.runtime import Monitor
from tests.support.pageserver import OPENMETRICS, TEXT, Generated, Page, PageServer

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
START, STEP = 1_700_000_000.0, 15.0
BOUNDS = ("0.1", "0.5", "1.0", "+Inf")


@dataclass(frozen=True)
class Values:
    """One scrape's worth of engine state (engine "0", one model)."""

    stop: float
    error: float
    gen: float
    prompt: float
    preempt: float
    ttft: tuple[float, float, float, float]  # cumulative counts for BOUNDS
    running: float = 5.0
    waiting: float = 1.0
    kv: float = 0.5


def grow(hit: int) -> Values:
    """Steady traffic: every counter grows each scrape."""
    return Values(stop=100 + 30 * hit, error=2 + hit, gen=1000 + 600 * hit, prompt=5000 + 3000 * hit,
                  preempt=3 + hit, ttft=(40 + 10 * hit, 80 + 20 * hit, 95 + 25 * hit, 102 + 30 * hit),
                  running=float(hit), kv=0.1 * hit)


def labels(pairs: dict[str, str], reverse: bool = False) -> str:
    items = sorted(pairs.items(), reverse=reverse)
    return "{" + ",".join(f'{k}="{v}"' for k, v in items) + "}"


def series(extra: dict[str, str] | None = None, reverse: bool = False) -> str:
    return labels({"engine": "0", "model_name": MODEL, **(extra or {})}, reverse)


def text_page(v: Values, reverse: bool = False) -> str:
    """A Prometheus text (0.0.4) page the way vLLM V1 writes one."""
    s = lambda extra=None: series(extra, reverse)  # noqa: E731
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{s()} {v.running!r}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{s()} {v.waiting!r}",
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{s()} {v.kv!r}",
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{s()} {v.preempt!r}",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{s()} {v.prompt!r}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{s()} {v.gen!r}",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f"vllm:request_success_total{s({'finished_reason': 'stop'})} {v.stop!r}",
        f"vllm:request_success_total{s({'finished_reason': 'error'})} {v.error!r}",
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        *(f"vllm:time_to_first_token_seconds_bucket{s({'le': le})} {count!r}"
          for le, count in zip(BOUNDS, v.ttft, strict=True)),
        f"vllm:time_to_first_token_seconds_sum{s()} {0.2 * v.ttft[-1]!r}",
        f"vllm:time_to_first_token_seconds_count{s()} {v.ttft[-1]!r}",
    ]
    return "\n".join(lines) + "\n"


def openmetrics_page(v: Values) -> str:
    """The same state as OpenMetrics 1.0: families without `_total`, `_created`, exemplars, # EOF."""
    s = series
    created = 1_699_999_000.0
    exemplar = ' # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.043 1699999999.123'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        f"vllm:num_requests_running{s()} {v.running!r}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{s()} {v.waiting!r}",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{s()} {v.kv!r}",
        "# TYPE vllm:num_preemptions counter",
        "# HELP vllm:num_preemptions Cumulative number of preemption from the engine.",
        f"vllm:num_preemptions_total{s()} {v.preempt!r}",
        f"vllm:num_preemptions_created{s()} {created!r}",
        "# TYPE vllm:prompt_tokens counter",
        f"vllm:prompt_tokens_total{s()} {v.prompt!r}",
        f"vllm:prompt_tokens_created{s()} {created!r}",
        "# TYPE vllm:generation_tokens counter",
        f"vllm:generation_tokens_total{s()} {v.gen!r}{exemplar}",
        f"vllm:generation_tokens_created{s()} {created!r}",
        "# TYPE vllm:request_success counter",
        f"vllm:request_success_total{s({'finished_reason': 'stop'})} {v.stop!r}{exemplar}",
        f"vllm:request_success_created{s({'finished_reason': 'stop'})} {created!r}",
        f"vllm:request_success_total{s({'finished_reason': 'error'})} {v.error!r}",
        f"vllm:request_success_created{s({'finished_reason': 'error'})} {created!r}",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        "# UNIT vllm:time_to_first_token_seconds seconds",
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        *(f"vllm:time_to_first_token_seconds_bucket{s({'le': le})} {count!r}{exemplar}"
          for le, count in zip(BOUNDS, v.ttft, strict=True)),
        f"vllm:time_to_first_token_seconds_count{s()} {v.ttft[-1]!r}",
        f"vllm:time_to_first_token_seconds_sum{s()} {0.2 * v.ttft[-1]!r}",
        f"vllm:time_to_first_token_seconds_created{s()} {created!r}",
        "# EOF",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Result:
    text: str  # /metrics after the last scrape
    row: dict[str, Any]  # the target's row in the status API
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]]

    def number(self, metric: str, **labels: str) -> float | None:
        key = tuple(sorted({"target": "t", "model": MODEL, "window": "1m", **labels}.items()))
        return self.samples.get(metric, {}).get(key)

    def service_lines(self) -> list[str]:
        return [line for line in self.text.splitlines()
                if line and not line.startswith(("#", "inference_monitor_"))]


def scrape(pages: list[str | Page]) -> Result:
    """Serve pages[i] to the i-th scrape of target "t"; one cycle per page, STEP seconds apart."""
    with PageServer() as server:
        url = server.set("/metrics", Generated(lambda hit: pages[hit - 1]))
        settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
            "scrape_timeout": "2s", "windows": ["1m"], "targets": [{"name": "t", "url": url}],
        }})
        clock = [START]
        monitor = Monitor(settings, wall=lambda: clock[0])

        async def cycles() -> str:
            for index in range(len(pages)):
                if index:
                    clock[0] += STEP
                await asyncio.wait_for(monitor.run_once(), 10)
            await monitor.aclose()
            return monitor.metrics_text().decode()

        text = asyncio.run(cycles())
        assert server.hits["/metrics"] == len(pages)
    (row,) = monitor.status()["layers"]["service"]["targets"]
    return Result(text, row, parse(text).samples)


def assert_up(result: Result) -> None:
    assert result.row["up"] is True and result.row["error"] is None, result.row
    assert 'inference_target_up{target="t"} 1.0' in result.text.splitlines()


def assert_finite(result: Result) -> None:
    for line in result.service_lines():
        assert math.isfinite(float(line.rsplit(" ", 1)[1])), line


STEADY = [text_page(grow(hit)) for hit in range(4)]


# -- counter reset ---------------------------------------------------------------------------------


def test_counter_reset_is_rated_like_prometheus() -> None:
    """The engine restarts between the 2nd and 3rd scrape: every counter starts again near 0.

    Prometheus' extrapolatedRate on points at 1000, 1015, 1030, 1045 (relative) for the window
    [985, 1045]: sampled interval 45 s, the first point 15 s after the window start (less than
    1.1 x the 15 s average step, so extrapolate all of it), none after the last point:
        increase = delta * (45 + min(15, to_zero)) / 45,   to_zero = 45 * first / delta
        rate     = increase / 60
    where delta = last - first + (the value before each reset).
    """
    values = [
        Values(stop=100, error=2, gen=1000, prompt=5000, preempt=3, ttft=(40, 80, 95, 102)),
        Values(stop=130, error=2, gen=1600, prompt=8000, preempt=3, ttft=(50, 100, 120, 132)),
        Values(stop=10, error=0, gen=300, prompt=1000, preempt=0, ttft=(4, 8, 10, 12)),  # restarted
        Values(stop=40, error=0, gen=900, prompt=4000, preempt=1, ttft=(10, 30, 35, 42)),
    ]
    result = scrape([text_page(v) for v in values])
    assert_up(result)

    def rate(first: float, delta: float) -> float:
        to_zero = 45 * first / delta if delta > 0 else math.inf
        return delta * (45 + min(15.0, to_zero)) / 45 / 60

    gen_delta = 900 - 1000 + 1600  # 1500: the 1600 before the reset is added back
    assert result.number("inference_generation_tokens_per_second") == pytest.approx(
        rate(1000, gen_delta), rel=1e-12)
    assert rate(1000, gen_delta) == pytest.approx(100 / 3, rel=1e-15)  # 2000 tokens over 60 s
    prompt_delta = 4000 - 5000 + 8000
    assert result.number("inference_prompt_tokens_per_second") == pytest.approx(
        rate(5000, prompt_delta), rel=1e-12)
    # requests = stop + error children, each rated on its own before summing.
    stop_rate, error_rate = rate(100, 40 - 100 + 130), rate(2, 0 - 2 + 2)
    assert error_rate == 0.0
    assert result.number("inference_requests_per_second") == pytest.approx(stop_rate, rel=1e-12)
    assert result.number("inference_request_error_ratio") == 0.0
    # preemptions: delta 1 from a first value of 3; to_zero = 135 s does not bind.
    assert result.number("inference_preemptions_per_second") == pytest.approx(1 / 45, rel=1e-12)

    # TTFT buckets, reset-corrected increases (each bucket's own to_zero does not bind):
    #   le=0.1: 10-40+50 = 20, le=0.5: 30-80+100 = 50, le=1.0: 35-95+120 = 60, +Inf: 42-102+132 = 72
    # histogram_quantile(0.5): rank 36 lies in (0.1, 0.5]: 0.1 + 0.4 * (36 - 20) / (50 - 20)
    ttft = "inference_ttft_seconds"
    assert result.number(ttft, quantile="0.5") == pytest.approx(0.1 + 0.4 * 16 / 30, rel=1e-12)
    # 0.95 and 0.99 (ranks 68.4, 71.28) fall in the +Inf bucket: the highest finite bound.
    assert result.number(ttft, quantile="0.95") == 1.0
    assert result.number(ttft, quantile="0.99") == 1.0
    # Share of requests with TTFT <= 200 ms: (20 + 30 * (0.2 - 0.1) / 0.4) / 72
    share = result.number("inference_slo_attainment_ratio", objective="ttft")
    assert share == pytest.approx(27.5 / 72, rel=1e-12)


# -- duplicates, non-finite values, unknown families, label order -------------------------------------


def test_duplicate_series_are_reported_and_counted_once(caplog: pytest.LogCaptureFixture) -> None:
    def with_duplicates(hit: int) -> str:
        v = grow(hit)
        return text_page(v) + "\n".join([
            # the same series again with another value: the first one stays
            f"vllm:generation_tokens_total{series()} {10 * v.gen!r}",
            # the same series with its labels in another order is still the same series
            f"vllm:num_requests_running{series(reverse=True)} {v.running + 100!r}",
            f"vllm:time_to_first_token_seconds_bucket{series({'le': '0.5'}, reverse=True)} 0.0",
        ]) + "\n"

    with caplog.at_level(logging.WARNING, logger="monitor"):
        result = scrape([with_duplicates(hit) for hit in range(4)])
    clean = scrape(STEADY)
    assert_up(result)
    assert result.row["duplicate_series"] == 3
    assert clean.row["duplicate_series"] == 0
    assert result.service_lines() == clean.service_lines()
    # 600 tokens per 15 s; the extrapolation to the window start does not change a steady rate.
    assert result.number("inference_generation_tokens_per_second") == pytest.approx(40.0, rel=1e-12)
    assert result.samples["inference_requests_running"][(("model", MODEL), ("target", "t"))] == 3.0
    assert "target t: 3 duplicate series on the page (first one kept)" in caplog.messages


def test_nan_and_inf_samples_never_reach_our_numbers() -> None:
    def dirty(hit: int) -> str:
        v = replace(grow(hit), kv=math.nan)  # the only KV-cache sample is NaN
        e1 = {"engine": "1"}
        page = text_page(v).replace(
            f"vllm:request_success_total{series({'finished_reason': 'error'})} {v.error!r}",
            f"vllm:request_success_total{series({'finished_reason': 'error'})} NaN")
        return page + "\n".join([
            f"vllm:request_success_total{series({'finished_reason': 'length'})} +Inf",
            f"vllm:num_preemptions_total{series(e1)} NaN",
            *(f"vllm:time_to_first_token_seconds_bucket{series({**e1, 'le': le})} NaN" for le in BOUNDS),
            *(f"vllm:e2e_request_latency_seconds_bucket{series({'le': le})} {value}"
              for le, value in zip(BOUNDS, ("NaN", "NaN", "+Inf", "+Inf"), strict=True)),
            f"vllm:num_requests_running{series(e1)} +Inf",
            f"vllm:num_requests_waiting{series(e1)} -Inf",
        ]) + "\n"

    # The clean twin: the same finite samples; its errors stay at 2 (rate 0, like a NaN'd series).
    clean_pages = [text_page(replace(grow(hit), error=2.0)) for hit in range(4)]
    result, clean = scrape([dirty(hit) for hit in range(4)]), scrape(clean_pages)
    assert_up(result)
    assert_finite(result)
    # Non-finite samples we read per page: error + length, preemptions e1, 4 TTFT e1 buckets,
    # 4 e2e buckets, KV cache, running e1, waiting e1 -- each sample counted once.
    assert result.row["non_finite_samples"] == 2 + 1 + 4 + 4 + 1 + 1 + 1
    assert "inference_kv_cache_usage_ratio" not in result.samples  # NaN is not exported as a value
    assert "inference_e2e_latency_seconds" not in result.samples  # no finite +Inf bucket: no quantile
    # The KV-cache gauge is NaN on the page: neither the total nor its rank's value is exported.
    expected = [line for line in clean.service_lines()
                if not line.startswith(("inference_kv_cache_usage", "inference_rank_kv_cache_usage"))]
    assert result.service_lines() == expected
    assert result.number("inference_request_error_ratio") == 0.0


def test_unknown_families_are_ignored() -> None:
    noise = "\n".join([
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 1234.0',
        "# TYPE vllm:some_future_metric_total counter",
        f"vllm:some_future_metric_total{series()} 99.0",
        f"vllm:generation_tokens_total_by_source{series({'source': 'x'})} 5e9",
        "# TYPE vllm:num_requests_running_max gauge",
        f"vllm:num_requests_running_max{series()} 512",
        "# TYPE rpc_duration_seconds summary",
        'rpc_duration_seconds{quantile="0.5"} 0.05',
        "rpc_duration_seconds_sum 17.5",
        "rpc_duration_seconds_count 2693",
        "# TYPE weird untyped",
        "weird 1 1700000000000",
        "# a free-form comment line with \"quotes\" and { braces }",
        "# HELP escaped help with \\\\ backslash and \\n newline",
        'label_escapes{path="C:\\\\dir",quote="\\"q\\"",nl="a\\nb"} 1',
        "",
    ])

    def noisy(hit: int) -> str:
        v = grow(hit)
        half = text_page(v).split("# HELP vllm:prompt_tokens_total")
        return noise + half[0] + noise + "# HELP vllm:prompt_tokens_total" + half[1] + noise

    result, clean = scrape([noisy(hit) for hit in range(4)]), scrape(STEADY)
    assert_up(result)
    assert result.service_lines() == clean.service_lines()
    assert result.samples["inference_requests_running"][(("model", MODEL), ("target", "t"))] == 3.0


def test_label_order_may_change_between_scrapes() -> None:
    shuffled = [text_page(grow(hit), reverse=hit % 2 == 1) for hit in range(4)]
    assert shuffled[0] != shuffled[1]
    result, clean = scrape(shuffled), scrape(STEADY)
    assert_up(result)
    assert result.service_lines() == clean.service_lines()
    assert result.number("inference_generation_tokens_per_second") is not None


def test_bucket_with_a_non_numeric_le_is_skipped() -> None:
    # histogram_quantile skips a bucket whose `le` is not a number (BadBucketLabelWarning).
    def odd(hit: int) -> str:
        return text_page(grow(hit)) + f"vllm:time_to_first_token_seconds_bucket{series({'le': 'abc'})} 7\n"

    result, clean = scrape([odd(hit) for hit in range(4)]), scrape(STEADY)
    assert_up(result)
    assert result.service_lines() == clean.service_lines()


# -- OpenMetrics ------------------------------------------------------------------------------------


def test_openmetrics_page_gives_the_text_page_numbers() -> None:
    om_pages: list[str | Page] = [Page(openmetrics_page(grow(hit)), content_type=OPENMETRICS)
                                  for hit in range(4)]
    text_pages: list[str | Page] = [Page(page, content_type=TEXT) for page in STEADY]
    result, clean = scrape(om_pages), scrape(text_pages)
    assert_up(result)
    assert result.service_lines() == clean.service_lines()
    for metric in ("inference_requests_per_second", "inference_generation_tokens_per_second",
                   "inference_prompt_tokens_per_second", "inference_preemptions_per_second"):
        assert result.number(metric) is not None, metric
    assert result.number("inference_ttft_seconds", quantile="0.5") is not None


def test_openmetrics_page_without_eof_is_truncated() -> None:
    cut = openmetrics_page(grow(0)).replace("# EOF\n", "")
    result = scrape([Page(cut, content_type=OPENMETRICS)])
    assert result.row["up"] is False
    assert result.row["error"] == "OpenMetrics page without '# EOF': truncated"


def test_openmetrics_sample_without_labels_keeps_its_exemplar_apart() -> None:
    # A label-less sample whose exemplar has labels: the '{' belongs to the exemplar.
    page = parse(
        "# TYPE requests counter\n"
        'requests_total 17 # {trace_id="4bf92f35"} 1 1699999999.5\n'
        "requests_created 1699999000\n"
        "# EOF\n",
        openmetrics=True,
    )
    assert page.samples["requests_total"] == {(): 17.0}
