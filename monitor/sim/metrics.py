"""The vLLM V1 simulator's /metrics page, on a private prometheus_client registry.

Names, HELP texts, label sets (`engine`, `model_name`), bucket lists and registration order
follow what a current `vllm serve` prints (see tests/fixtures/sample_vllm_v1.prom), so the
monitor cannot tell the simulator from vLLM by the page's shape. Numbers come only from
requests the simulator really served: counters and histograms move when the engine reports
a step, gauges are refreshed from the scheduler state at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from monitor.sim import buckets
from monitor.sim.engine import SimulatedEngine
from monitor.sim.serving_metrics import NixlFamilies, OffloadFamilies
from monitor.sim.stats import FINISH_REASONS, EngineSnapshot, FinishedRequestStats, IterationStats
from monitor.sim.tiers import KV_BYTES_PER_TOKEN

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A comment line is legal exposition text and says what produced the page.
PAGE_BANNER = b"# Served by the inference-monitor vLLM V1 SIMULATOR (monitor.sim), not by vLLM.\n"

_LABELS = ("model_name", "engine")

# vLLM >= 0.32's estimated model work, registered first on its page: attribute -> (name, HELP).
_WORK: dict[str, tuple[str, str]] = {
    "flops": ("vllm:estimated_flops_per_gpu",
              "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations)."),
    "read_bytes": ("vllm:estimated_read_bytes_per_gpu",
                   "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations)."),
    "write_bytes": ("vllm:estimated_write_bytes_per_gpu",
                    "Estimated number of bytes written to memory per GPU (for Model Flops Utilization "
                    "calculations)."),
}  # fmt: skip
# The simulated model's size for those estimates: Llama-3.1-8B in bf16 (2 FLOPs per weight and
# token; the weights read once a step; K and V of 32 layers x 8 heads x 128 written per token).
MODEL_PARAMS = 8.0e9
WEIGHT_BYTES = 2.0 * MODEL_PARAMS
CACHE_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")

# Gauges in page order: attribute -> (name, HELP, extra label).
_GAUGES: dict[str, tuple[str, str, str | None]] = {
    "running": ("vllm:num_requests_running",
                "Number of requests in model execution batches.", None),
    "waiting": ("vllm:num_requests_waiting",
                "Number of requests waiting to be processed.", None),
    "waiting_by_reason": ("vllm:num_requests_waiting_by_reason",
                          "Number of waiting requests by reason. Reason labels: 'capacity' = "
                          "waiting for scheduling capacity; 'deferred' = deferred by transient "
                          "constraints (LoRA budget, KV transfer, blocked status). Sum of all "
                          "reasons equals vllm:num_requests_waiting.", "reason"),
    "sleep_state": ("vllm:engine_sleep_state",
                    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means "
                    "engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = "
                    "1 means sleep level 2.", "sleep_state"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", None),
}  # fmt: skip

# Counters in page order: attribute -> (name without _total, HELP, extra label).
_COUNTERS: dict[str, tuple[str, str, str | None]] = {
    "prefix_queries": ("vllm:prefix_cache_queries",
                       "Prefix cache queries, in terms of number of queried tokens.", None),
    "prefix_hits": ("vllm:prefix_cache_hits",
                    "Prefix cache hits, in terms of number of cached tokens.", None),
    "external_queries": ("vllm:external_prefix_cache_queries",
                         "External prefix cache queries from KV connector cross-instance cache "
                         "sharing, in terms of number of queried tokens.", None),
    "external_hits": ("vllm:external_prefix_cache_hits",
                      "External prefix cache hits from KV connector cross-instance cache "
                      "sharing, in terms of number of cached tokens.", None),
    "mm_queries": ("vllm:mm_cache_queries",
                   "Multi-modal cache queries, in terms of number of queried items.", None),
    "mm_hits": ("vllm:mm_cache_hits",
                "Multi-modal cache hits, in terms of number of cached items.", None),
    "preemptions": ("vllm:num_preemptions",
                    "Cumulative number of preemption from the engine.", None),
    "prompt_tokens": ("vllm:prompt_tokens", "Number of prefill tokens processed.", None),
    "prompt_by_source": ("vllm:prompt_tokens_by_source",
                         "Number of prompt tokens by source.", "source"),
    "prompt_cached": ("vllm:prompt_tokens_cached",
                      "Number of cached prompt tokens (local + external).", None),
    "prompt_cached_by_source": ("vllm:prompt_tokens_cached_by_source",
                                "Prefix-cache hit tokens by the cache tier that supplied them: device "
                                "(local HBM), host (offloaded to DRAM), disk, p2p (transferred from another "
                                "vLLM instance) or external_unspecified. Counted at admission; sums to "
                                "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.", "source"),
    "prompt_recomputed": ("vllm:prompt_tokens_recomputed",
                          "Number of cached tokens recomputed for forward pass.", None),
    "generation_tokens": ("vllm:generation_tokens",
                          "Number of generation tokens processed.", None),
    "success": ("vllm:request_success",
                "Count of successfully processed requests.", "finished_reason"),
}  # fmt: skip

# Histograms in page order: attribute -> (name, HELP).
_HISTOGRAMS: dict[str, tuple[str, str]] = {
    "prompt_len": ("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    "generation_len": ("vllm:request_generation_tokens",
                       "Number of generation tokens processed."),
    "iteration_tokens": ("vllm:iteration_tokens_total",
                         "Histogram of number of tokens per engine_step."),
    "max_generation": ("vllm:request_max_num_generation_tokens",
                       "Histogram of maximum number of requested generation tokens."),
    "params_n": ("vllm:request_params_n", "Histogram of the n request parameter."),
    "params_max_tokens": ("vllm:request_params_max_tokens",
                          "Histogram of the max_tokens request parameter."),
    "ttft": ("vllm:time_to_first_token_seconds",
             "Histogram of time to first token in seconds."),
    "itl": ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    "tpot": ("vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request."),
    "e2e": ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    "queue": ("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request."),
    "inference": ("vllm:request_inference_time_seconds",
                  "Histogram of time spent in RUNNING phase for request."),
    "prefill": ("vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request."),
    "decode": ("vllm:request_decode_time_seconds",
               "Histogram of time spent in DECODE phase for request."),
    "preemptions": ("vllm:request_num_preemptions",
                    "Histogram of the number of times a request was preempted."),
    "prefill_kv": ("vllm:request_prefill_kv_computed_tokens",
                   "Histogram of new KV tokens computed during prefill (excluding cached "
                   "tokens)."),
}  # fmt: skip


def _bucket_table(max_model_len: int) -> dict[str, list[float]]:
    tokens = buckets.token_count_buckets(max_model_len)
    table = dict.fromkeys(("prompt_len", "generation_len", "max_generation",
                           "params_max_tokens", "prefill_kv"), tokens)  # fmt: skip
    table.update(dict.fromkeys(("e2e", "queue", "inference", "prefill", "decode"),
                               buckets.REQUEST_LATENCY))  # fmt: skip
    table.update(params_n=buckets.REQUEST_PARAMS_N, iteration_tokens=buckets.ITERATION_TOKENS,
                 ttft=buckets.TIME_TO_FIRST_TOKEN, itl=buckets.PER_OUTPUT_TOKEN,
                 tpot=buckets.PER_OUTPUT_TOKEN, preemptions=REQUEST_PREEMPTIONS)  # fmt: skip
    return table


REQUEST_PREEMPTIONS = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]  # vLLM 0.32's request_num_preemptions bounds


class SimMetrics:
    """vLLM-shaped metrics for one simulated engine (`engine="0"`)."""

    def __init__(
        self,
        model_name: str,
        *,
        engine_index: str = "0",
        max_model_len: int = 32768,
        num_gpu_blocks: int = 29127,
        block_size: int = 16,
        registry: CollectorRegistry | None = None,
        process_metrics: bool = True,
        host_tier: bool = False,
        pd: bool = False,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self._labels = (model_name, engine_index)
        self._snapshot: Callable[[], EngineSnapshot] | None = None
        if process_metrics:
            PlatformCollector(registry=self.registry)
            ProcessCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._work = {key: Counter(name, doc, _LABELS, registry=self.registry) for key, (name, doc) in _WORK.items()}
        for counter in self._work.values():
            counter.labels(*self._labels)
        self._gauges = self._make_gauges()
        self._counters = self._make_counters()
        # The front end's refusals by a queue limit (HTTP 503; no engine label): the simulator sets
        # no queue limit, so they stay 0 unless record_admission_rejection() is called.
        self._rejections = Counter("vllm:admission_rejections",
                                   "Number of admission attempts rejected by a queue limit, by reason.",
                                   ("model_name", "reason"), registry=self.registry)  # fmt: skip
        for reason in ADMISSION_REASONS:
            self._rejections.labels(model_name, reason)
        self._hist = self._make_histograms(max_model_len)
        self._make_cache_config_info(num_gpu_blocks, block_size, engine_index)
        self._http_requests = Counter(
            "http_requests", "Total number of requests by method, status and handler.",
            ("method", "status", "handler"), registry=self.registry,
        )  # fmt: skip
        self._http_duration = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by "
            "handler is important. ",  # sic: the trailing space is in the instrumentator
            ("handler", "method"), buckets=buckets.HTTP_DURATION, registry=self.registry,
        )  # fmt: skip
        # The KV connectors' families (monitor.sim.serving_metrics), only for the shapes the engine has.
        shapes = ((host_tier, OffloadFamilies), (pd, NixlFamilies))
        self._serving = [family(self.registry, self._labels, _LABELS) for on, family in shapes if on]

    def attach(self, engine: SimulatedEngine) -> SimMetrics:
        """Follow an engine: its steps feed the counters, its state the gauges."""
        engine.add_observer(self.record)
        self._snapshot = engine.snapshot
        return self

    def _make_gauges(self) -> dict[str, Gauge]:
        gauges = {}
        for key, (name, doc, extra) in _GAUGES.items():
            labels = _LABELS + ((extra,) if extra else ())
            gauge = Gauge(name, doc, labels, registry=self.registry)
            if extra is None:
                gauge.labels(*self._labels)
            gauges[key] = gauge
        for reason in ("capacity", "deferred"):
            gauges["waiting_by_reason"].labels(*self._labels, reason)
        for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            gauges["sleep_state"].labels(*self._labels, state).set(value)
        return gauges

    def _make_counters(self) -> dict[str, Counter]:
        counters = {}
        for key, (name, doc, extra) in _COUNTERS.items():
            labels = _LABELS + ((extra,) if extra else ())
            counter = Counter(name, doc, labels, registry=self.registry)
            if extra is None:
                counter.labels(*self._labels)  # vLLM creates every child up front
            counters[key] = counter
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            counters["prompt_by_source"].labels(*self._labels, source)
        for source in CACHE_SOURCES:
            counters["prompt_cached_by_source"].labels(*self._labels, source)
        for reason in FINISH_REASONS:
            counters["success"].labels(*self._labels, reason)
        return counters

    def _make_histograms(self, max_model_len: int) -> dict[str, Histogram]:
        table = _bucket_table(max_model_len)
        hists = {}
        for key, (name, doc) in _HISTOGRAMS.items():
            hist = Histogram(name, doc, _LABELS, buckets=table[key], registry=self.registry)
            hist.labels(*self._labels)
            hists[key] = hist
        return hists

    def _make_cache_config_info(self, num_gpu_blocks: int, block_size: int, engine: str) -> None:
        info = {
            "block_size": str(block_size), "cache_dtype": "auto",
            "calculate_kv_scales": "False", "cpu_offload_gb": "0",
            "enable_prefix_caching": "True", "engine": engine,
            "gpu_memory_utilization": "0.9", "is_attention_free": "False",
            "num_cpu_blocks": "None", "num_gpu_blocks": str(num_gpu_blocks),
            "num_gpu_blocks_override": "None", "prefix_caching_hash_algo": "sha256",
            "sliding_window": "None", "swap_space": "4", "swap_space_bytes": "4294967296",
        }  # fmt: skip
        gauge = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                      tuple(info), registry=self.registry)  # fmt: skip
        gauge.labels(**info).set(1)

    # ---- updates ------------------------------------------------------------------------

    def record(self, stats: IterationStats) -> None:
        """Apply one engine step, as vLLM's PrometheusStatLogger.record() does."""
        self._count_tokens(stats)
        ttft = self._hist["ttft"].labels(*self._labels)
        for value in stats.time_to_first_tokens:
            ttft.observe(value)
        itl = self._hist["itl"].labels(*self._labels)
        for value in stats.inter_token_latencies:
            itl.observe(value)
        if stats.num_scheduled_tokens:
            self._hist["iteration_tokens"].labels(*self._labels).observe(
                stats.num_scheduled_tokens
            )
            self._work["flops"].labels(*self._labels).inc(2.0 * MODEL_PARAMS * stats.num_scheduled_tokens)
            self._work["read_bytes"].labels(*self._labels).inc(WEIGHT_BYTES)
            self._work["write_bytes"].labels(*self._labels).inc(KV_BYTES_PER_TOKEN * stats.num_scheduled_tokens)
        for finished in stats.finished:
            self._record_finished(finished)
        for family in self._serving:
            family.record(stats)

    def _count_tokens(self, stats: IterationStats) -> None:
        increments = {
            "prefix_queries": stats.prefix_cache_queries,
            "prefix_hits": stats.prefix_cache_hits,
            "preemptions": stats.num_preemptions,
            "prompt_tokens": stats.num_prompt_tokens,
            "prompt_cached": stats.num_cached_prompt_tokens,
            "generation_tokens": stats.num_generation_tokens,
        }
        for key, amount in increments.items():
            if amount:
                self._counters[key].labels(*self._labels).inc(amount)
        if stats.tier_lookup_tokens:  # the offloading connector's lookups and hits (host memory)
            self._counters["external_queries"].labels(*self._labels).inc(stats.tier_lookup_tokens)
        if stats.tier_hit_tokens:
            self._counters["external_hits"].labels(*self._labels).inc(stats.tier_hit_tokens)
            self._counters["prompt_cached_by_source"].labels(*self._labels, "host").inc(stats.tier_hit_tokens)
        if stats.prefix_cache_hits:  # vLLM counts hits at admission, all from the GPU's own cache here
            self._counters["prompt_cached_by_source"].labels(*self._labels, "device").inc(stats.prefix_cache_hits)
        if stats.num_prompt_tokens:
            by_source = self._counters["prompt_by_source"]
            loaded = stats.num_loaded_prompt_tokens  # the KV connector's (host tier): 0 without one
            computed = stats.num_prompt_tokens - stats.num_cached_prompt_tokens - loaded
            by_source.labels(*self._labels, "local_compute").inc(computed)
            by_source.labels(*self._labels, "local_cache_hit").inc(stats.num_cached_prompt_tokens)
            if loaded:
                by_source.labels(*self._labels, "external_kv_transfer").inc(loaded)

    def _record_finished(self, done: FinishedRequestStats) -> None:
        self._counters["success"].labels(*self._labels, done.finish_reason).inc()
        observations = {
            "e2e": done.e2e_latency, "queue": done.queued_time,
            "prefill": done.prefill_time, "inference": done.inference_time,
            "decode": done.decode_time, "prompt_len": done.num_prompt_tokens,
            "generation_len": done.num_generation_tokens,
            "max_generation": done.num_generation_tokens, "params_n": done.n_param,
            "tpot": done.mean_time_per_output_token,
            "prefill_kv": done.prefill_kv_computed_tokens,
            "preemptions": done.num_preemptions,
        }  # fmt: skip
        if done.max_tokens_param is not None:
            observations["params_max_tokens"] = done.max_tokens_param
        for key, value in observations.items():
            self._hist[key].labels(*self._labels).observe(value)

    def record_admission_rejection(self, reason: str) -> None:
        """A request the front end refused by a queue limit (`reason`: one of ADMISSION_REASONS)."""
        self._rejections.labels(self._labels[0], reason).inc()

    def record_http(self, handler: str, method: str, status_code: int, duration_s: float) -> None:
        status = f"{status_code // 100}xx"  # grouped like prometheus-fastapi-instrumentator
        self._http_requests.labels(method, status, handler).inc()
        self._http_duration.labels(handler, method).observe(duration_s)

    def set_scheduler_state(self, snap: EngineSnapshot) -> None:
        self._gauges["running"].labels(*self._labels).set(snap.num_running)
        self._gauges["waiting"].labels(*self._labels).set(snap.num_waiting)
        self._gauges["waiting_by_reason"].labels(*self._labels, "capacity").set(snap.num_waiting)
        self._gauges["kv_usage"].labels(*self._labels).set(snap.kv_cache_usage)

    def render(self) -> bytes:
        """The page, with gauges read from the engine at this instant."""
        if self._snapshot is not None:
            self.set_scheduler_state(self._snapshot())
        return PAGE_BANNER + generate_latest(self.registry)
