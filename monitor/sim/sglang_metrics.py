"""The simulator's SGLang-shaped /metrics page (`EngineConfig.page = "sglang"`), on a private registry.

The same simulated engine, printed as SGLang's collectors print it (sgl-project/sglang
`python/sglang/srt/metrics/collector.py`): the tokenizer's request counters and latency histograms
(labels model_name, engine_type), the scheduler's gauges (plus tp_rank, pp_rank, moe_ep_rank), the
HTTP middleware's responses by status code, and, for the serving shapes the engine has
(monitor.sim.tiers):

    host tier   HiCache: load-back duration (histogram) and tokens host -> GPU, the eviction's copy
                GPU -> host (duration, tokens), the host pool's used and total tokens, cached tokens
                by source (device, host)
    P/D split   the decode instance's KV transfer latency (histogram, in ms) and speed (GB/s), its
                transfer queue, failed transfers and bootstraps
    MoE         EPLB's balancedness per decode forward pass (a Summary, forward_mode="decode"),
                printed with SGLANG_ENABLE_EPLB_BALANCEDNESS_METRIC

Only the families SGLang prints for the configuration are on the page; bucket lists are SGLang's.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest

from monitor.sim.engine import SimulatedEngine
from monitor.sim.metrics import CONTENT_TYPE, PAGE_BANNER
from monitor.sim.stats import EngineSnapshot, FinishedRequestStats, IterationStats

__all__ = ["CONTENT_TYPE", "SglangMetrics"]

TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0]
INTER_TOKEN = [0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2,
               0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0]
E2E = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
       600.0, 1200.0, 1800.0, 2400.0]
QUEUE = [0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
         50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0,
         1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0]
TOKENS = [100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0,
          9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0, 30000.0, 35000.0,
          40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1e6, 1.1e6]
# HiCache's default bounds for the load-back (and the eviction's copy) duration, 1 ms .. 1 s.
HICACHE_SECONDS = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04, 0.05,
                   0.1, 0.2, 0.5, 1.0]
KV_TRANSFER_MS = [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0]
KV_TRANSFER_GB_S = [0.1, 0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0]

_TOKENIZER = ("model_name", "engine_type")
_SCHEDULER = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")


class SglangMetrics:
    """SGLang-shaped metrics for one simulated engine (one TP rank, no data parallelism)."""

    def __init__(self, model_name: str, *, max_total_num_tokens: int, host_tier: bool = False, pd: bool = False,
                 moe: bool = False, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        engine_type = "decode" if pd else "unified"
        self._tok = (model_name, engine_type)
        self._sched = (model_name, engine_type, "0", "0", "0")
        self._snapshot: Callable[[], EngineSnapshot] | None = None
        self._hist = {
            "ttft": Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              _TOKENIZER, buckets=TTFT, registry=reg),
            "itl": Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             _TOKENIZER, buckets=INTER_TOKEN, registry=reg),
            "e2e": Histogram("sglang:e2e_request_latency_seconds",
                             "Histogram of End-to-end request latency in seconds", _TOKENIZER, buckets=E2E,
                             registry=reg),
            "prompt": Histogram("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", _TOKENIZER,
                                buckets=TOKENS, registry=reg),
            "generation": Histogram("sglang:generation_tokens_histogram", "Histogram of generation token length.",
                                    _TOKENIZER, buckets=TOKENS, registry=reg),
            "queue": Histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", _TOKENIZER,
                               buckets=QUEUE, registry=reg),
        }
        self._gauges = {
            "running": Gauge("sglang:num_running_reqs", "The number of running requests.", _SCHEDULER, registry=reg),
            "queue": Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", _SCHEDULER,
                           registry=reg),
            "usage": Gauge("sglang:token_usage", "The token usage.", _SCHEDULER, registry=reg),
            "max_tokens": Gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
                                _SCHEDULER, registry=reg),
        }
        self._gauges["max_tokens"].labels(*self._sched).set(max_total_num_tokens)
        self._counters = {
            "prompt": Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", _TOKENIZER, registry=reg),
            "generation": Counter("sglang:generation_tokens", "Number of generation tokens processed.", _TOKENIZER,
                                  registry=reg),
            "cached": Counter("sglang:cached_tokens", "Number of cached prompt tokens by source (device/host/storage).",
                              (*_TOKENIZER, "cache_source"), registry=reg),
            "requests": Counter("sglang:num_requests", "Number of requests processed.", _TOKENIZER, registry=reg),
            "aborted": Counter("sglang:num_aborted_requests", "Number of requests aborted.", _TOKENIZER, registry=reg),
            "retracted": Counter("sglang:num_retracted_requests", "Total number of retracted requests.", _SCHEDULER,
                                 registry=reg),
        }
        self._http = Counter("sglang:http_responses", "Total number of HTTP responses by endpoint and status code.",
                             ("endpoint", "status_code"), registry=reg)
        for family in (*self._hist.values(), *(self._counters[k] for k in ("prompt", "generation", "requests",
                                                                           "aborted"))):
            family.labels(*self._tok)
        self._counters["retracted"].labels(*self._sched)
        for source in ("device", "host") if host_tier else ("device",):
            self._counters["cached"].labels(*self._tok, source)
        self._tier = _HiCache(reg, self._sched) if host_tier else None
        self._pd = _Disaggregation(reg, self._sched) if pd else None
        self._moe = Summary("sglang:eplb_balancedness", "Balancedness of MoE in expert parallelism.",
                            (*_SCHEDULER, "forward_mode"), registry=reg) if moe else None

    def attach(self, engine: SimulatedEngine) -> SglangMetrics:
        engine.add_observer(self.record)
        self._snapshot = engine.snapshot
        return self

    def record(self, stats: IterationStats) -> None:
        for value in stats.time_to_first_tokens:
            self._hist["ttft"].labels(*self._tok).observe(value)
        for value in stats.inter_token_latencies:
            self._hist["itl"].labels(*self._tok).observe(value)
        counts = {"prompt": stats.num_prompt_tokens, "generation": stats.num_generation_tokens}
        for key, amount in counts.items():
            if amount:
                self._counters[key].labels(*self._tok).inc(amount)
        if stats.num_cached_prompt_tokens:
            self._counters["cached"].labels(*self._tok, "device").inc(stats.num_cached_prompt_tokens)
        if stats.num_preemptions:
            self._counters["retracted"].labels(*self._sched).inc(stats.num_preemptions)
        for finished in stats.finished:
            self._record_finished(finished)
        if self._tier is not None:
            self._tier.record(stats)
            if stats.tier_hit_tokens:
                self._counters["cached"].labels(*self._tok, "host").inc(stats.tier_hit_tokens)
        if self._pd is not None:
            self._pd.record(stats)
        if self._moe is not None:
            for value in stats.moe_balancedness:
                self._moe.labels(*self._sched, "decode").observe(value)

    def _record_finished(self, done: FinishedRequestStats) -> None:
        if done.finish_reason == "abort":
            self._counters["aborted"].labels(*self._tok).inc()
            return
        if done.finish_reason == "error":
            return  # SGLang's only error count is the HTTP middleware's 5xx
        self._counters["requests"].labels(*self._tok).inc()
        observations = {"e2e": done.e2e_latency, "queue": done.queued_time, "prompt": done.num_prompt_tokens,
                        "generation": done.num_generation_tokens}
        for key, value in observations.items():
            self._hist[key].labels(*self._tok).observe(value)

    def record_admission_rejection(self, reason: str) -> None:
        """SGLang has no queue-limit counter of vLLM's kind: nothing to count."""

    def record_http(self, handler: str, method: str, status_code: int, duration_s: float) -> None:
        if handler.startswith("/v1/"):
            self._http.labels(handler, str(status_code)).inc()

    def render(self) -> bytes:
        if self._snapshot is not None:
            snap = self._snapshot()
            self._gauges["running"].labels(*self._sched).set(snap.num_running)
            self._gauges["queue"].labels(*self._sched).set(snap.num_waiting)
            self._gauges["usage"].labels(*self._sched).set(snap.kv_cache_usage)
            if self._tier is not None:
                self._tier.set_state(snap)
            if self._pd is not None:
                self._pd.set_state(snap)
        return PAGE_BANNER.replace(b"vLLM V1", b"vLLM V1 engine, SGLang-shaped page,") + generate_latest(self.registry)


class _HiCache:
    def __init__(self, reg: CollectorRegistry, labels: tuple[str, ...]) -> None:
        self._labels = labels
        self._load_s = Histogram("sglang:load_back_duration_seconds",
                                 "Time taken to load memory from CPU to GPU in seconds.", _SCHEDULER,
                                 buckets=HICACHE_SECONDS, registry=reg)
        self._load_tokens = Counter("sglang:load_back_tokens", "The number of tokens loaded from CPU to GPU.",
                                    _SCHEDULER, registry=reg)
        self._evict_s = Histogram("sglang:eviction_duration_seconds",
                                  "Time taken to evict memory from GPU to CPU in seconds.", _SCHEDULER,
                                  buckets=HICACHE_SECONDS, registry=reg)
        self._evict_tokens = Counter("sglang:evicted_tokens", "The number of tokens evicted from GPU to CPU.",
                                     _SCHEDULER, registry=reg)
        self._used = Gauge("sglang:hicache_host_used_tokens", "The number of used tokens in the host KV cache.",
                           _SCHEDULER, registry=reg)
        self._total = Gauge("sglang:hicache_host_total_tokens", "The total number of tokens in the host KV cache.",
                            _SCHEDULER, registry=reg)
        for family in (self._load_s, self._load_tokens, self._evict_s, self._evict_tokens):
            family.labels(*labels)

    def record(self, stats: IterationStats) -> None:
        for op in stats.kv_loads:
            self._load_s.labels(*self._labels).observe(op.seconds)
            self._load_tokens.labels(*self._labels).inc(op.tokens)
        for op in stats.kv_stores:
            self._evict_s.labels(*self._labels).observe(op.seconds)
            self._evict_tokens.labels(*self._labels).inc(op.tokens)

    def set_state(self, snap: EngineSnapshot) -> None:
        self._used.labels(*self._labels).set(snap.host_tier_tokens or 0)
        self._total.labels(*self._labels).set(snap.host_tier_capacity or 0)


class _Disaggregation:
    def __init__(self, reg: CollectorRegistry, labels: tuple[str, ...]) -> None:
        self._labels = labels
        self._latency = Histogram("sglang:kv_transfer_latency_ms", "Histogram of KV cache transfer latency in ms.",
                                  _SCHEDULER, buckets=KV_TRANSFER_MS, registry=reg)
        self._speed = Histogram("sglang:kv_transfer_speed_gb_s", "Histogram of KV cache transfer speed in GB/s.",
                                _SCHEDULER, buckets=KV_TRANSFER_GB_S, registry=reg)
        self._queue = Gauge("sglang:num_decode_transfer_queue_reqs",
                            "The number of requests in the decode transfer queue.", _SCHEDULER, registry=reg)
        self._failed = Counter("sglang:num_transfer_failed_reqs", "The number of transfer failed requests.",
                               _SCHEDULER, registry=reg)
        self._bootstrap_failed = Counter("sglang:num_bootstrap_failed_reqs",
                                         "The number of bootstrap failed requests.", _SCHEDULER, registry=reg)
        for family in (self._latency, self._speed, self._failed, self._bootstrap_failed):
            family.labels(*labels)

    def record(self, stats: IterationStats) -> None:
        for op in stats.pd_transfers:
            self._latency.labels(*self._labels).observe(op.seconds * 1000.0)
            if op.seconds > 0:
                self._speed.labels(*self._labels).observe(op.bytes / op.seconds / 1e9)
        if stats.pd_failed:
            self._failed.labels(*self._labels).inc(stats.pd_failed)

    def set_state(self, snap: EngineSnapshot) -> None:
        self._queue.labels(*self._labels).set(snap.num_transferring)
