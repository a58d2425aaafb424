"""A real vLLM server (vLLM's CPU build, tests/support/vllm_real.py): the monitor, the canary and
`infermon bench` against the engine most of the monitor's users run, not its metric code alone.

One server for the module (30-75 s to start on 2 cores). Its KV cache is made small (6 blocks of
128 tokens) and its prompts share a long prefix, so the numbers a vLLM operator checks first --
request rate, tokens/s, TTFT/TPOT/E2E/queue quantiles, prefix-cache hits, preemptions, admission
rejections -- are all real and none is trivially zero (KV usage is compared at the idle scrapes,
so there it is 0; the bench test reads it under load).

The comparison with Prometheus: the real `prometheus` scrapes the server every 0.5 s; the monitor
scrapes it twice, while it is idle (its counters do not move), with its clock set to the times of
two of Prometheus' own scrapes, t1 and t2 = t1 + k x 0.5 s. Evaluated at t2 over a range of
k x 0.5 s + 0.25 s, both then hold the same first and last sample of every series, and rate() /
histogram_quantile() must agree to the last bits.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.canary.outcome import judge as judge_probe
from monitor.canary.probe import Prober
from monitor.config import CanaryProbe, CostSettings, Duration, load_settings
from monitor.cost.prices import PriceBook
from monitor.loadtest import sampling
from monitor.loadtest.data import load_dataset
from monitor.loadtest.load import Level
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.scenario import RequestClass, Scenario
from monitor.runtime import Monitor
from monitor.service.promql import histogram_quantile
from tests.alerting.contextviews import assert_context_matches
from tests.alerting.test_context_sim import MetricsAtFiring, ttft_rules
from tests.conftest import require_binary
from tests.support.promserver import PrometheusServer
from tests.support.vllm_real import KV_BLOCKS, MODEL_NAME, VERSION, VllmServer, vllm_home

pytestmark = [pytest.mark.prometheus, pytest.mark.long]

INTERVAL_MS = 500  # Prometheus' scrape interval
STEPS = (16, 24, 36, 60)  # k: t2 = t1 + k intervals, the first one after the load has ended
# The monitor's windows: k intervals + 0.25 s, and around it every 50 ms (a scrape of a loaded
# Prometheus may start late): the one closest to (t2 - t1) + 0.25 s is compared.
WINDOWS = [f"{k * INTERVAL_MS + INTERVAL_MS // 2 + d}ms" for k in STEPS for d in range(-200, 201, 50)]
WORDS = ["the", "monitor", "reads", "the", "engine", "page", "and", "the", "queue", "and", "the", "cache", "of",
         "every", "model", "server", "then", "it", "answers", "each", "question", "about", "latency", "rate",
         "histogram", "and", "quantile"]
# ~150 words of the trained vocabulary (one token each): the first 128-token block is shared.
PREFIX = " ".join(WORDS[i % len(WORDS)] for i in range(150))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    home = vllm_home()
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with VllmServer(home, log) as running:
        print(f"\nvLLM up in {running.startup_s:.1f} s, RSS {running.rss_bytes() / 2**20:.0f} MiB")
        yield running


def load(server: VllmServer, requests: int, concurrency: int, max_tokens: int) -> list[dict[str, Any]]:
    """`requests` completions sharing PREFIX, `concurrency` at a time, from one event loop (a
    thread pool's requests reached the server one by one, and the engine idled between them)."""
    async def run() -> list[dict[str, Any]]:
        slots = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
            async def one(n: int) -> dict[str, Any]:
                async with slots:
                    answer = await client.post(f"{server.url}/v1/completions", json={
                        "model": MODEL_NAME, "prompt": f"{PREFIX} question {n} {WORDS[n % len(WORDS)]}",
                        "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0})
                assert answer.status_code == 200, answer.text
                body: dict[str, Any] = answer.json()
                return body

            return list(await asyncio.gather(*(one(n) for n in range(requests))))

    return asyncio.run(run())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(page: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in page.items() if n == name)


COUNTERS = ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
            "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
            "vllm:admission_rejections_total", "vllm:estimated_flops_per_gpu_total")


def wait_idle(server: VllmServer, timeout_s: float = 60.0) -> dict[str, float]:
    """Until nothing runs or waits and two reads 0.3 s apart show the same counters."""
    deadline = time.monotonic() + timeout_s
    previous: dict[str, float] | None = None
    while time.monotonic() < deadline:
        page = samples(server.metrics())
        now = {name: total(page, name) for name in COUNTERS}
        busy = total(page, "vllm:num_requests_running") + total(page, "vllm:num_requests_waiting")
        if busy == 0 and now == previous:
            return now
        previous = now
        time.sleep(0.3)  # polling for a condition, bounded by the deadline
    raise AssertionError(f"vLLM did not go idle in {timeout_s} s")


def prometheus_sample_times(prom: PrometheusServer, after: float, timeout_s: float = 30.0,
                            until: float | None = None) -> list[float]:
    """Prometheus' scrape times of the server after `after` (once one lies at or past `until`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = prom.query("vllm:generation_tokens_total[60s]")
        times = sorted(float(t) for series in result for t, _ in series["values"] if float(t) > after)
        if times and (until is None or times[-1] >= until):
            return times
        time.sleep(0.1)  # polling for a condition, bounded by the deadline
    raise AssertionError(f"Prometheus took no scrape after {after} within {timeout_s} s")


def test_the_monitor_reads_the_same_numbers_as_prometheus(server: VllmServer) -> None:
    binary = require_binary("prometheus")
    # Every series there before the first scrape, every counter above 0 (a series born between the
    # two scrapes has one sample for the monitor and several for Prometheus; Prometheus extrapolates
    # no counter below 0): two answers, and a burst that the queue limit partly refuses.
    load(server, 2, 2, 8)
    assert 503 in refused_burst(server), "the queue limit refused nothing"
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {"windows": WINDOWS, "scrape_interval": "1s",
                                                "targets": [{"name": "vllm", "url": f"{server.url}/metrics"}]}})
    clock = [0.0]
    step_s = INTERVAL_MS / 1000
    refused: list[int] = []  # the burst's answers' HTTP statuses

    with PrometheusServer({"vllm": [f"{server.url}/metrics"]}, interval=f"{INTERVAL_MS}ms", binary=binary) as prom:
        async def run() -> tuple[float, str, dict[str, float], Any]:
            monitor = Monitor(settings, client=httpx.AsyncClient(trust_env=False), wall=lambda: clock[0])
            try:
                before = wait_idle(server)
                t1 = prometheus_sample_times(prom, time.time())[0]  # a scrape of the idle server
                clock[0] = t1
                await monitor.run_once()
                await asyncio.to_thread(load, server, LOADED, 4, LOAD_TOKENS)
                refused.extend(await asyncio.to_thread(refused_burst, server))
                after = wait_idle(server)
                idle = time.time()
                steps = next((k for k in STEPS if t1 + k * step_s > idle + 0.2), None)
                assert steps is not None, f"the load took over {STEPS[-1] * step_s} s"
                t2 = min(prometheus_sample_times(prom, idle, until=t1 + steps * step_s),
                         key=lambda t: abs(t - t1 - steps * step_s))
                # The window: no scrape of Prometheus' between its start and t1 (the one before t1
                # is about 0.5 s earlier), t1 well inside it, so both extrapolate alike.
                window = min(WINDOWS, key=lambda w: abs(Duration(w).seconds - (t2 - t1) - step_s / 2))
                lead = Duration(window).seconds - (t2 - t1)
                earlier = [t for t in prometheus_sample_times(prom, t1 - 5) if t < t1]
                assert 0.2 <= lead <= 0.3 and (not earlier or t2 - Duration(window).seconds > max(earlier)), (
                    t1, t2, window, earlier[-1:])
                clock[0] = t2
                await monitor.run_once()
                assert wait_idle(server) == after  # nothing moved while the two scraped
                return t2, window, {k: after[k] - before[k] for k in after}, monitor.service.view
            finally:
                await monitor.aclose()

        t2, window, moved, view = asyncio.run(run())

        def one(expr: str) -> float:
            result = prom.query(expr, at=t2)
            assert len(result) == 1, (expr, result)
            return float(result[0]["value"][1])

        def rate(name: str) -> str:
            return f"sum(rate({name}[{window}]))"

        theirs = {
            "requests": one(rate("vllm:request_success_total")),
            "prompt_tokens": one(rate("vllm:prompt_tokens_total")),
            "generation_tokens": one(rate("vllm:generation_tokens_total")),
            "preemptions": one(rate("vllm:num_preemptions_total")),
            "prefix_hit_ratio": one(f"{rate('vllm:prefix_cache_hits_total')} / "
                                    f"{rate('vllm:prefix_cache_queries_total')}"),
            "kv_cache": one("max(vllm:kv_cache_usage_perc)"),
            "running": one("sum(vllm:num_requests_running)"),
            "admission_rejections": one(rate("vllm:admission_rejections_total")),
            # What the clients saw: the API's HTTP 5xx share (vLLM finished no request with an error).
            "error_ratio": one(f'sum(rate(http_requests_total{{status="5xx",handler=~"/v1/.*"}}[{window}])) / '
                               f'sum(rate(http_requests_total{{handler=~"/v1/.*"}}[{window}]))'),
            "estimated_flops": one(rate("vllm:estimated_flops_per_gpu_total")),
            "estimated_read_bytes": one(rate("vllm:estimated_read_bytes_per_gpu_total")),
            "estimated_write_bytes": one(rate("vllm:estimated_write_bytes_per_gpu_total")),
        }
        by_source = {r["metric"]["source"]: float(r["value"][1]) for r in prom.query(
            f"sum by (source) (rate(vllm:prompt_tokens_cached_by_source_total[{window}]))", at=t2)}
        for metric, name in HISTOGRAMS.items():
            for q in QUANTILES:
                theirs[f"{metric}_p{round(q * 100)}"] = one(
                    f"histogram_quantile({q}, sum by (le) (rate({name}_bucket[{window}])))")
    target = view.targets["vllm"]
    assert (target.up, target.engine, target.generation) == (True, "vllm", "v1")
    stats = target.stats[(MODEL_NAME, window)]
    ours = {
        "requests": stats.requests_per_second,
        "prompt_tokens": stats.prompt_tokens_per_second,
        "generation_tokens": stats.generation_tokens_per_second,
        "preemptions": stats.preemptions_per_second,
        "prefix_hit_ratio": stats.prefix_cache_hit_ratio,
        "kv_cache": target.gauges["kv_cache"][MODEL_NAME],
        "running": target.gauges["running"][MODEL_NAME],
        "admission_rejections": stats.admission_rejections_per_second,
        "error_ratio": stats.error_ratio,
        "estimated_flops": stats.estimated_flops_per_second,
        "estimated_read_bytes": stats.estimated_read_bytes_per_second,
        "estimated_write_bytes": stats.estimated_write_bytes_per_second,
    }
    for metric in HISTOGRAMS:
        for q in QUANTILES:
            ours[f"{metric}_p{round(q * 100)}"] = stats.quantiles[metric][q]
    print(f"\nwindow {window}\nours       {ours}\nprometheus {theirs}\nmoved {moved}\nrefused {refused}")
    # The load really ran, and none of the numbers compared is empty.
    rejected = refused.count(503)
    assert sorted(set(refused)) == [200, 503] and rejected == moved["vllm:admission_rejections_total"], refused
    assert moved["vllm:request_success_total"] == LOADED + BURST - rejected
    assert moved["vllm:generation_tokens_total"] == LOADED * LOAD_TOKENS + (BURST - rejected) * BURST_TOKENS
    assert moved["vllm:prefix_cache_hits_total"] > 0 and theirs["prefix_hit_ratio"] > 0
    assert moved["vllm:num_preemptions_total"] > 0 and theirs["queue_p99"] > 0
    assert theirs["error_ratio"] > 0 and theirs["estimated_flops"] > 0 and theirs["estimated_read_bytes"] > 0
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, ours, theirs)
    assert stats.prompt_tokens_cached_by_source == pytest.approx(by_source, rel=1e-9, abs=1e-12)
    assert by_source["device"] == pytest.approx(theirs["prefix_hit_ratio"] * theirs["prompt_tokens"], rel=1e-9)
    # rate(): the increase over the scrapes' distance (the window less its lead), extrapolated a
    # little further (never below zero).
    span = Duration(window).seconds - step_s / 2
    assert ours["generation_tokens"] == pytest.approx(moved["vllm:generation_tokens_total"] / span, rel=0.05)


HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "e2e": "vllm:e2e_request_latency_seconds",
              "queue": "vllm:request_queue_time_seconds", "tpot": "vllm:request_time_per_output_token_seconds",
              "request_preemptions": "vllm:request_num_preemptions"}
LOADED, LOAD_TOKENS = 6, 160  # answers at concurrency 4: with the shared block, 9 KV blocks wanted of 6
# At once, past the server's queue limit (MAX_QUEUED): some get HTTP 503; 4 run, 2 wait, and the
# admitted ones' 310 tokens (3 blocks, the first shared) overflow the 6 KV blocks: preemptions.
# 20 > 4 running + 6 queued by a margin: a burst sent slowly (a busy machine) still overflows.
BURST, BURST_TOKENS = 20, 160


def burst(server: VllmServer, requests: int) -> list[int]:
    """`requests` completions sent at once (one event loop: threads arrived one by one); their HTTP statuses."""
    async def run() -> list[int]:
        async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
            async def one(n: int) -> int:
                answer = await client.post(f"{server.url}/v1/completions", json={
                    "model": MODEL_NAME, "prompt": f"burst {n} {PREFIX}", "max_tokens": BURST_TOKENS,
                    "ignore_eos": True, "temperature": 0})
                return answer.status_code

            return list(await asyncio.gather(*(one(n) for n in range(requests))))

    return asyncio.run(run())


def refused_burst(server: VllmServer, requests: int = BURST, tries: int = 3) -> list[int]:
    """A burst the queue limit partly refuses: the statuses of up to `tries` bursts, until one had a
    503. A burst the server drained as it arrived (the suite's load slowed the sending: about one
    run of the suite in ten) refused nothing, and is sent again."""
    statuses: list[int] = []
    for _ in range(tries):
        statuses.extend(burst(server, requests))
        if 503 in statuses:
            break
    return statuses


QUANTILES = (0.5, 0.95, 0.99)


def test_check_recognises_vllm_and_the_canary_agrees_with_the_engine(server: VllmServer, tmp_path: Path) -> None:
    """What an operator runs first: `infermon check` (a real process) names the engine and its
    generation, with a canary through the real API; then a probe's numbers against the engine's."""
    config = tmp_path / "vllm.yaml"
    config.write_text(
        "infra: {nvml: {enabled: 'false'}}\nalerting: {enabled: false}\n"
        f"service:\n  targets: [{{name: edge, url: '{server.url}/metrics'}}]\n"
        "canary:\n  probes:\n"
        f"    - {{name: edge, base_url: '{server.url}/v1', model: {MODEL_NAME}, target: edge, max_tokens: 8}}\n")
    result = subprocess.run([sys.executable, "-m", "monitor.cli", "check", "--config", str(config)],
                            capture_output=True, text=True, timeout=120, check=False,
                            env={**os.environ, "INFERMON_STORAGE__URL": "sqlite://"})
    lines = result.stdout.splitlines()
    (up,) = [line for line in lines if line.startswith("  edge ")]
    assert up.endswith("up, vllm v1"), result.stdout + result.stderr
    # The random model may end its answer at once (its end-of-text is one of 512 tokens): then the
    # canary says empty_answer, which `check` reports; anything else is a failure.
    canary = [line for line in lines if line.startswith("  canary edge")]
    assert canary and (" ok, TTFT " in canary[0] or "empty_answer" in canary[0]), result.stdout

    probe = CanaryProbe(name="edge", base_url=f"{server.url}/v1", model=MODEL_NAME, max_tokens=16)
    before = samples(server.metrics())

    async def run() -> Any:
        prober = Prober(probe, user="infermon-canary")
        try:
            return await prober.run()
        finally:
            await prober.aclose()

    observed = asyncio.run(run())
    wait_idle(server)
    after = samples(server.metrics())
    outcome = judge_probe(observed)

    def moved(name: str) -> float:
        return total(after, name) - total(before, name)

    assert moved("vllm:request_success_total") == 1
    assert outcome.output_tokens == moved("vllm:generation_tokens_total")
    if outcome.ok:  # (an empty answer has no TTFT of the client's)
        assert outcome.ttft_seconds is not None and outcome.e2e_seconds is not None
        engine_ttft = moved("vllm:time_to_first_token_seconds_sum")  # this one request's
        # The engine counts from the request's arrival in its front end; the client also waits
        # for HTTP and the SDK (milliseconds here; the bound leaves room for a loaded machine).
        assert engine_ttft <= outcome.ttft_seconds <= min(outcome.e2e_seconds, engine_ttft + 5.0)
        assert moved("vllm:e2e_request_latency_seconds_sum") <= outcome.e2e_seconds


def test_bench_engine_figures_are_the_engines_own_histograms(server: VllmServer, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`infermon bench` against the real server: the conditions (engine, version, KV-cache config
    from vLLM's own info gauge) and the engine-side figures of a window, which must be the
    increase of the engine's counters and histogram_quantile() of its buckets between the two
    pages the bench read."""
    pages: list[str] = []
    original = sampling.EnginePage.scrape

    async def recording(self: sampling.EnginePage) -> Any:
        snapshot = await original(self)
        pages.append(self.text or "")
        return snapshot

    monkeypatch.setattr(sampling.EnginePage, "scrape", recording)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "{PREFIX} question {n}"}}\n' for n in range(20)))
    scenario = Scenario("real-vllm", (RequestClass("short", 1.0, 160, 160),), (4,))
    config = BenchConfig(target=server.url, model=MODEL_NAME, scenario=scenario, dataset=load_dataset(prompts),
                         levels=[Level("concurrency", 4)], duration_s=4.0, repeats=1, warmup=2, timeout_s=60.0,
                         extra_body={"ignore_eos": True}, sample_interval_s=0.25)
    result = asyncio.run(run_bench(config, None, PriceBook(CostSettings())))

    conditions = result["conditions"]["server"]
    assert (conditions["engine"], conditions["generation"], conditions["version"]) == ("vllm", "v1", VERSION)
    assert conditions["models"] == [MODEL_NAME] and conditions["max_model_len"] == 512
    cache = conditions["config"]["cache_config_info"]
    assert cache["num_gpu_blocks"] == str(KV_BLOCKS) and cache["enable_prefix_caching"] == "True"

    window = result["levels"][0]["repeats"][0]
    engine = window["engine"]
    assert window["failed"] == 0 and window["requests"] > 0, window["outcomes"]
    first, last = samples(pages[1]), samples(pages[-1])  # pages[0]: the conditions' read

    def moved(name: str) -> float:
        return total(last, name) - total(first, name)

    assert engine["requests"] == pytest.approx(moved("vllm:request_success_total"), rel=1e-3)
    assert engine["generation_tokens"] == pytest.approx(moved("vllm:generation_tokens_total"), rel=1e-3)
    assert engine["prompt_tokens"] == pytest.approx(moved("vllm:prompt_tokens_total"), rel=1e-3)
    for figure, name in (("ttft_s", "vllm:time_to_first_token_seconds"), ("queue_s", "vllm:request_queue_time_seconds"),
                         ("tpot_s", "vllm:request_time_per_output_token_seconds")):
        buckets: dict[float, float] = {}
        for (sample, labels), value in last.items():
            if sample == f"{name}_bucket":
                le = dict(labels)["le"]
                buckets[float(le)] = buckets.get(float(le), 0.0) + value - first.get((sample, labels), 0.0)
        for key, q in (("p50", 0.5), ("p99", 0.99)):
            expected = histogram_quantile(q, sorted(buckets.items()))
            assert engine[figure][key] == pytest.approx(expected, rel=1e-3), (figure, key, engine[figure], buckets)
    # The window's answers were what the engine finished then, give or take the ones in flight at
    # its edges; the client waits at least as long as the engine for a first token.
    assert abs(engine["requests"] - window["requests"]) <= 4
    assert engine["prefix_cache_hit_ratio"] > 0.5  # the prompts share their first 128-token block
    # The page's gauges were read while the load ran (every 0.25 s). That a read finds the engine
    # busy is the simulator's test (tests/loadtest/test_run_sim.py: max == 6 at c=6): here, on a
    # machine the rest of the suite keeps busy, the API server answered every read between answers
    # in two suite runs out of three, finding the engine idle.
    assert engine["requests_running"]["max"] >= 0 and engine["kv_cache_usage_ratio"]["max"] >= 0, engine
    assert engine["ttft_s"]["p50"] <= window["ttft_s"]["p99"]
    # The input lengths by vLLM's own tokenizer (POST /tokenize, chat template applied) before the load
    # are the prompt tokens its `usage` counted during it (the prompts differ by a digit at most).
    work = result["conditions"]["workload"]
    exact, served = work["lengths_exact"], work["served"]
    assert "the engine's tokenizer" in exact["from"] and exact["requests"] == 100
    assert exact["input_tokens"]["mean"] == pytest.approx(served["input_tokens"]["mean"], abs=1.0)
    assert served["output_tokens"]["p50"] == 160 and served["output_from"] == "usage.completion_tokens"


def test_a_missing_install_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.support.vllm_real as vllm_real

    monkeypatch.delenv("VLLM_CPU_HOME", raising=False)
    monkeypatch.setattr(vllm_real, "_cached_home", lambda: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not installed"):
        vllm_real.vllm_home()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        vllm_real.vllm_home()


def test_a_ttft_alert_on_the_real_engine_carries_the_numbers_it_fired_on(server: VllmServer, tmp_path: Path) -> None:
    """The shipped TTFTP99High (threshold 1 ms, window 1m, `for` 30 s) against the real engine, on an
    injected clock of 15 s a cycle with real answers between the cycles: at the firing transition
    the alert's context holds exactly the values /metrics held then (tests/alerting/test_context_sim.py
    does the same against the simulator)."""
    rules = ttft_rules(tmp_path)
    text = rules.read_text().replace("> 0.04", "> 0.001")
    assert text != rules.read_text()
    rules.write_text(text)
    settings = load_settings(None, {
        "service": {"targets": [{"name": "vllm-a", "url": f"{server.url}/metrics"}], "windows": ["1m"]},
        "infra": {"nvml": {"enabled": "false"}}, "alerting": {"rules_files": [str(rules)]}})
    clock = [time.time()]
    sink = MetricsAtFiring()

    async def run() -> tuple[Any, str]:
        monitor = Monitor(settings, client=httpx.AsyncClient(trust_env=False), wall=lambda: clock[0], sink=sink)
        sink.monitor = monitor
        try:
            for _ in range(8):
                await asyncio.to_thread(load, server, 4, 4, 24)
                await monitor.run_once()
                if sink.firing("TTFTP99High"):
                    break
                clock[0] += 15.0
        finally:
            await monitor.aclose()
        fired = sink.firing("TTFTP99High")
        assert fired, [(a.name, a.status) for a, _ in sink.sent]
        return fired[0]

    alert, page = asyncio.run(run())
    notes = alert.annotations
    print("\n" + notes["probable_cause"] + "\n" + notes["context"])
    assert notes["summary"] == "P99 time to first token above 1 s on vllm-a"  # the rule's own text stays
    assert assert_context_matches(notes["context"], page) >= 3
    lines = notes["context"].splitlines()
    assert any(line.startswith(f"vllm-a model={MODEL_NAME} window=1m ") for line in lines), lines
    assert not any(line.startswith("GPU ") for line in lines)  # no GPU for it: nothing, not zeros
