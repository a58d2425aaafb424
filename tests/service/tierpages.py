"""Engine pages with KV-cache tiers, P/D transfer and MoE balance, written by prometheus_client.

The families carry the names, types, labels and bucket lists the engines' own code declares
(SGLang srt/metrics collector.py: HiCache load_back / eviction, the P/D transfer histogram and
failure counters, the EPLB balancedness Summary; vLLM: the OffloadingConnector's load/store
families, the multi-tier offloading's per-`tier` counters, the NIXL connector's). The numbers are
the observations a test feeds, so each page's quantiles and rates have known answers.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest

SGLANG_MODEL = "Qwen/Qwen3-235B-A22B"
VLLM_MODEL = "meta-llama/Llama-3.1-70B-Instruct"
# SGLang's scheduler labels (one DP rank) and its tokenizer's
_SCHED = {"model_name": SGLANG_MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
          "moe_ep_rank": "0", "dp_rank": "0"}
_TOKENIZER = {"model_name": SGLANG_MODEL, "engine_type": "unified", "is_streaming": "true"}
# bucket_load_back_duration / bucket_eviction_duration (SGLang's defaults)
HICACHE_BUCKETS = (0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04,
                   0.05, 0.1, 0.2, 0.5, 1.0)
SGLANG_TRANSFER_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
                       200.0, 400.0)
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
NIXL_XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_BYTES_BUCKETS = tuple(2 ** (10 + i) for i in range(1, 25, 2))
OFFLOAD_SIZE_BUCKETS = (1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6)


class SglangTiered:
    """One SGLang engine with HiCache, P/D (prefill side) and EPLB metrics on."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        sched, tok = list(_SCHED), list(_TOKENIZER)
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", sched, registry=r)
        self.queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched, registry=r)
        self.usage = Gauge("sglang:token_usage", "The token usage.", sched, registry=r)
        self.host_used = Gauge("sglang:hicache_host_used_tokens", "HiCache host tokens used.", sched, registry=r)
        self.host_total = Gauge("sglang:hicache_host_total_tokens", "HiCache host token capacity.", sched,
                                registry=r)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              tok, buckets=SGLANG_TTFT_BUCKETS, registry=r)
        self.eviction = Histogram("sglang:eviction_duration_seconds",
                                  "Time taken to evict memory from GPU to CPU in seconds.", sched,
                                  buckets=HICACHE_BUCKETS, registry=r)
        self.evicted = Counter("sglang:evicted_tokens_total", "The number of tokens evicted from GPU to CPU.",
                               sched, registry=r)
        self.load_back = Histogram("sglang:load_back_duration_seconds",
                                   "Time taken to load memory from CPU to GPU in seconds.", sched,
                                   buckets=HICACHE_BUCKETS, registry=r)
        self.loaded = Counter("sglang:load_back_tokens_total", "The number of tokens loaded from CPU to GPU.",
                              sched, registry=r)
        self.backed_up = Counter("sglang:hicache_backup_tokens_total",
                                 "The number of tokens backed up from GPU to host memory.", sched, registry=r)
        self.transfer = Histogram("sglang:kv_transfer_latency_ms", "Histogram of KV cache transfer latency in ms.",
                                  sched, buckets=SGLANG_TRANSFER_MS_BUCKETS, registry=r)
        self.transfer_failed = Counter("sglang:num_transfer_failed_reqs_total",
                                       "The number of transfer failed requests.", sched, registry=r)
        self.bootstrap_failed = Counter("sglang:num_bootstrap_failed_reqs_total",
                                        "The number of bootstrap failed requests.", sched, registry=r)
        self.balancedness = Summary("sglang:eplb_balancedness", "Balancedness of MoE in expert parallelism.",
                                    [*sched, "forward_mode"], registry=r)
        for gauge, value in ((self.running, 4), (self.queued, 0), (self.usage, 0.5)):
            gauge.labels(**_SCHED).set(value)

    def observe(self, *, load_back: Iterable[float] = (), eviction: Iterable[float] = (), loaded_tokens: int = 0,
                evicted_tokens: int = 0, transfer_ms: Iterable[float] = (), ttft: Iterable[float] = (),
                transfer_failed: int = 0, balancedness: Iterable[float] = (), backed_up_tokens: int = 0) -> None:
        for value in load_back:
            self.load_back.labels(**_SCHED).observe(value)
        for value in eviction:
            self.eviction.labels(**_SCHED).observe(value)
        self.loaded.labels(**_SCHED).inc(loaded_tokens)
        self.evicted.labels(**_SCHED).inc(evicted_tokens)
        self.backed_up.labels(**_SCHED).inc(backed_up_tokens)
        for value in transfer_ms:
            self.transfer.labels(**_SCHED).observe(value)
        for value in ttft:
            self.ttft.labels(**_TOKENIZER).observe(value)
        self.transfer_failed.labels(**_SCHED).inc(transfer_failed)
        for value in balancedness:
            self.balancedness.labels(**_SCHED, forward_mode="decode").observe(value)

    def host_pool(self, used: int, total: int) -> None:
        self.host_used.labels(**_SCHED).set(used)
        self.host_total.labels(**_SCHED).set(total)

    def page(self) -> str:
        return generate_latest(self.registry).decode()


class VllmTiered:
    """One vLLM V1 engine with the CPU offloading connector, multi-tier offloading and NIXL (decode side)."""

    def __init__(self, older_too: bool = False) -> None:
        """`older_too`: the CPU tier's older transfer_type families as well, beside the split ones (vLLM
        keeps printing them for that tier)."""
        r = self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.labels = {"model_name": VLLM_MODEL, "engine": "0"}
        self.older: tuple[Counter, Counter, Histogram] | None = None
        if older_too:
            by_type = [*labels, "transfer_type"]
            self.older = (Counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector.",
                                  by_type, registry=r),
                          Counter("vllm:kv_offload_total_time", "Total time measured by all KV offloading "
                                  "operations.", by_type, registry=r),
                          Histogram("vllm:kv_offload_size", "Histogram of KV offload transfer size, in bytes.",
                                    by_type, buckets=OFFLOAD_SIZE_BUCKETS, registry=r))
        Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
              registry=r).labels(**self.labels).set(0.6)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=VLLM_TTFT_BUCKETS, registry=r)
        self.xfer = Histogram("vllm:nixl_xfer_time_seconds",
                              "Histogram of transfer duration for NIXL KV Cache transfers.", labels,
                              buckets=NIXL_XFER_BUCKETS, registry=r)
        self.xfer_bytes = Histogram("vllm:nixl_bytes_transferred",
                                    "Histogram of bytes transferred per NIXL KV Cache transfers.", labels,
                                    buckets=NIXL_BYTES_BUCKETS, registry=r)
        self.xfer_failed = Counter("vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers.",
                                   labels, registry=r)
        self.load_bytes = Counter("vllm:kv_offload_load_bytes", "Total bytes loaded from offload storage to GPU.",
                                  labels, registry=r)
        self.load_time = Counter("vllm:kv_offload_load_time",
                                 "Total load time from offload storage to GPU, in seconds.", labels, registry=r)
        self.load_size = Histogram("vllm:kv_offload_load_size", "Histogram of KV offload load operation size, "
                                   "in bytes.", labels, buckets=OFFLOAD_SIZE_BUCKETS, registry=r)
        self.store_bytes = Counter("vllm:kv_offload_store_bytes", "Total bytes stored from GPU to offload storage.",
                                   labels, registry=r)
        self.ext_queries = Counter("vllm:external_prefix_cache_queries", "External prefix cache queries from KV "
                                   "connector cross-instance cache sharing, in terms of number of queried tokens.",
                                   labels, registry=r)
        self.ext_hits = Counter("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector "
                                "cross-instance cache sharing, in terms of number of cached tokens.", labels,
                                registry=r)
        self.chunk_queries = Counter("vllm:kv_offload_tiering_chunk_queries", "Chunk lookups per tier.",
                                     [*labels, "tier"], registry=r)
        self.chunk_hits = Counter("vllm:kv_offload_tiering_chunk_hits", "Chunk hits per tier.", [*labels, "tier"],
                                  registry=r)

    def observe(self, *, xfer: Iterable[float] = (), xfer_bytes: Iterable[float] = (), ttft: Iterable[float] = (),
                failed: int = 0, loads: Iterable[tuple[float, float]] = (), stored_bytes: float = 0.0,
                external: tuple[int, int] = (0, 0), chunks: dict[str, tuple[int, int]] | None = None) -> None:
        for value in xfer:
            self.xfer.labels(**self.labels).observe(value)
        for value in xfer_bytes:
            self.xfer_bytes.labels(**self.labels).observe(value)
        for value in ttft:
            self.ttft.labels(**self.labels).observe(value)
        self.xfer_failed.labels(**self.labels).inc(failed)
        for size, seconds in loads:  # one load of `size` bytes taking `seconds`
            self.load_size.labels(**self.labels).observe(size)
            self.load_bytes.labels(**self.labels).inc(size)
            self.load_time.labels(**self.labels).inc(seconds)
            if self.older is not None:
                total_bytes, total_time, sizes = self.older
                total_bytes.labels(**self.labels, transfer_type="CPU_to_GPU").inc(size)
                total_time.labels(**self.labels, transfer_type="CPU_to_GPU").inc(seconds)
                sizes.labels(**self.labels, transfer_type="CPU_to_GPU").observe(size)
        self.store_bytes.labels(**self.labels).inc(stored_bytes)
        if self.older is not None and stored_bytes:
            self.older[0].labels(**self.labels, transfer_type="GPU_to_CPU").inc(stored_bytes)
        queries, hits = external
        self.ext_queries.labels(**self.labels).inc(queries)
        self.ext_hits.labels(**self.labels).inc(hits)
        for tier, (tier_queries, tier_hits) in (chunks or {}).items():
            self.chunk_queries.labels(**self.labels, tier=tier).inc(tier_queries)
            self.chunk_hits.labels(**self.labels, tier=tier).inc(tier_hits)

    def page(self) -> str:
        return generate_latest(self.registry).decode()


# 1,000 loads back: 960 at or under 30 ms, 40 in (30 ms, 40 ms]: P99 interpolates to 37.5 ms.
SWAP_BACK = [0.0025] * 500 + [0.015] * 300 + [0.025] * 160 + [0.035] * 40


def sglang_pair(load_back: list[float] = SWAP_BACK) -> tuple[str, str]:
    """Two reads of one SGLang engine: before and after one window's traffic."""
    engine = SglangTiered()
    engine.host_pool(used=300_000, total=400_000)

    def window() -> None:
        engine.observe(load_back=load_back, eviction=[0.004] * 600, loaded_tokens=64_000, evicted_tokens=80_000,
                       backed_up_tokens=90_000, transfer_ms=[3.0] * 30 + [40.0] * 20, ttft=[0.5] * 100,
                       transfer_failed=3, balancedness=[0.6] * 50 + [0.9] * 50)

    # Twice the window's traffic before it: every series starts at twice what the window adds, so
    # rate() extrapolates all of them alike (Prometheus clamps the extrapolation at a counter's zero
    # point) and quantiles and ratios are the window's own, whenever they are taken.
    window()
    window()
    first = engine.page()
    window()
    return first, engine.page()


def vllm_pair(older_too: bool = False) -> tuple[str, str]:
    """Two reads of one vLLM engine, as `sglang_pair`."""
    engine = VllmTiered(older_too)

    def window() -> None:
        # 100 transfers: 60 of 20 ms and 40 of 80 ms (mean 44 ms) for 100 first tokens of 0.2 s each.
        engine.observe(xfer=[0.02] * 60 + [0.08] * 40, xfer_bytes=[64e6] * 100, ttft=[0.2] * 100, failed=2,
                       loads=[(20e6, 0.004)] * 40 + [(40e6, 0.012)] * 10, stored_bytes=4e9,
                       external=(10_000, 6_000), chunks={"0:primary": (1000, 900), "1:fs": (400, 100)})

    window()
    window()
    first = engine.page()
    window()
    return first, engine.page()


def fixture_pages() -> dict[str, str]:
    """tests/fixtures/tiers/: the second page of each pair, without prometheus_client's `_created`
    samples (wall-clock times), so the files are what this code writes."""
    def strip(text: str) -> str:
        return "".join(line + "\n" for line in text.splitlines() if "_created" not in line)

    return {"sglang_hicache_pd_eplb.prom": strip(sglang_pair()[1]), "vllm_offload_nixl.prom": strip(vllm_pair()[1])}
