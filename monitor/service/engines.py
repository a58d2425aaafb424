"""Serving engines as data: how each engine (and each renamed generation of it) names what we export.

Adding an engine is adding an `EngineSpec` to `ENGINES` and a fixture page under
tests/fixtures/pages/; nothing else switches on the engine. Names are the *sample* names as they
appear on the page (`vllm:prompt_tokens_total`, TGI's suffix-less `tgi_request_count`).

Every name is also read in its escaped spelling, each ':' written '_' (`vllm_prompt_tokens_total`):
prometheus_client >= 0.23 writes sample names that way when it answers with OpenMetrics (its
`escaping=underscores` default, while its # TYPE lines keep the colons), and a Prometheus that
negotiated the same way stores that spelling. A target may also say that every name sits behind a
prefix (`metric_prefix: kserve_` for KServe's queue-proxy, which republishes vLLM's metrics as
`kserve_vllm:...`).

Our metrics:
    counters    requests (all finished), errors (finished with an engine error), prompt_tokens
                (all prompt tokens, cached ones included), generation_tokens, preemptions;
                prefix_cache_hits / prefix_cache_queries (prompt tokens found in / looked up in the
                prefix cache); prompt_tokens_computed, prompt_seconds, generation_seconds
                (llama.cpp's busy-time counters: mean seconds per token)
    histograms  ttft, tpot, e2e, queue, prefill, decode, inference (base family names; `_bucket`
                is appended);
                prompt_len, generation_len (tokens per request: the cost layer's expensive requests)
    gauges      running, waiting, kv_cache; rank_running, rank_waiting, rank_kv_cache (per data-
                parallel rank); waiting_by_reason, sleep_state (vLLM); spec_accept_length,
                spec_accept_rate (SGLang's own, per logging interval)
    lora_info   the LoRA adapters running and waiting (vLLM)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from monitor.promtext import Labels, Page

_ACCEPTED_LIMIT = 1 << 16
Match = tuple[tuple[str, str], ...]
"""Label equality matchers a sample must satisfy, e.g. (("finished_reason", "error"),)."""


@dataclass(frozen=True)
class Selector:
    sample: str
    match: Match = ()
    exclude: Match = ()  # label values that do not count (e.g. TGI's aborted-by-client)
    # Answers by label set: a page's label tuples come back every scrape (equal, across targets
    # too), and a lookup costs less than the test. Emptied when it grows past _ACCEPTED_LIMIT.
    _accepted: dict[Labels, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def accepts(self, labels: Labels) -> bool:
        known = self._accepted.get(labels)
        if known is None:
            if len(self._accepted) >= _ACCEPTED_LIMIT:
                self._accepted.clear()  # labels that change every scrape (a request id): no leak
            known = self._accepted[labels] = self._test(labels)
        return known

    def _test(self, labels: Labels) -> bool:
        values = dict(labels)
        if any(values.get(k) != v for k, v in self.match):
            return False
        return not any(values.get(k) == v for k, v in self.exclude)


@dataclass(frozen=True)
class GaugeSpec:
    candidates: tuple[str, ...]  # first one present on the page wins
    # How series of one model combine: "sum" across engines/ranks (requests running),
    # "max" for ratios (the fullest KV cache is the one that preempts). Series that differ
    # only in a per-process label (`pid`) are one engine's value seen by several API-server
    # processes (vLLM 0.11: one holds it, the others 0.0): max'ed first.
    combine: str = "sum"  # or "max", or "mean" (a rate the engine computed per rank: averaged)
    scale: float = 1.0
    # A label kept apart (a rank, a waiting reason, a sleep state): one value per model and label
    # value, the other labels combined as above. The engines' own `engine` / `dp_rank` become `rank`.
    by: str | None = None


@dataclass(frozen=True)
class EngineSpec:
    engine: str
    generation: str
    markers: tuple[str, ...]  # sample names whose presence identifies this generation
    model_label: str | None
    counters: dict[str, tuple[Selector, ...]]
    histograms: dict[str, tuple[str, ...]]  # ours -> candidate base names, first present wins
    gauges: dict[str, GaugeSpec]
    process_labels: tuple[str, ...] = ("pid",)
    # Labels that are not part of a series' identity for our purposes but are kept for
    # rate-per-series (rank, engine index): listed only for documentation.
    notes: str = ""
    # Our metrics the page has only when a feature is configured (speculative decoding) or only in
    # later releases of the generation (vLLM 0.33's waiting reasons).
    optional: frozenset[str] = frozenset()
    # vLLM's LoRA info gauge: one series per adapter set seen, its value the time it was set; the
    # newest one's labels name the adapters running and waiting now (no model label).
    lora_info: str | None = None
    # Upstream's state of this table's engine: "" (current), "legacy" (removed upstream, still
    # read for old deployments), "archived, frozen" (the project stopped; the table is not grown).
    upstream: str = ""
    # Counters kept per one label's values (vLLM's accepted draft tokens per position): our metric ->
    # (selector, label); the snapshot holds one counter per value, named "metric/value".
    counters_by: dict[str, tuple[Selector, str]] = field(default_factory=dict)
    # Histograms whose bounds are not in seconds (SGLang's kv_transfer_latency_ms): ours -> factor
    # that turns a bound into seconds. Quantiles interpolate linearly, so scaling the bounds scales
    # histogram_quantile's answer by the same factor.
    histogram_scale: dict[str, float] = field(default_factory=dict)
    # Counters read only where another of the table's counters is on the page (ours -> that one, listed
    # before it): the TTFT's sum and count serve the P/D transfer's share of TTFT only, and every
    # engine without P/D would keep them for nothing.
    only_with: dict[str, str] = field(default_factory=dict)
    # Counters whose selectors are spellings of one family, not parts of it: the first with a series on
    # the page is read, the others not (a vLLM CPU tier prints its split load/store families and the
    # older transfer_type ones side by side: summed, every byte would count twice).
    first_of: frozenset[str] = frozenset()
    wanted: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names: set[str] = set(HTTP_SAMPLES)
        for selectors in self.counters.values():
            names.update(s.sample for s in selectors)
        names.update(selector.sample for selector, _ in self.counters_by.values())
        for candidates in self.histograms.values():
            names.update(f"{base}_bucket" for base in candidates)
        for gauge in self.gauges.values():
            names.update(gauge.candidates)
        if self.lora_info:
            names.add(self.lora_info)
        object.__setattr__(self, "wanted", frozenset(names))

    def page_names(self, prefix: str = "") -> dict[str, str]:
        """Every spelling a page may use for the names we read -> the name in this table."""
        return _page_names(self, prefix)

    def marker_spellings(self, prefix: str = "") -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for m in self.markers for s in spellings(m, prefix)))

    def absent(self) -> tuple[str, ...]:
        """Our headline numbers this engine's page has no source for (said in `check` and on /)."""
        missing = [m for m in ("requests", "errors") if m not in self.counters]
        missing += [m for m in ("ttft", "tpot", "e2e", "queue") if m not in self.histograms]
        return tuple(missing)

    def note(self, model: str | None = None) -> str:
        """One line for `check` and the overview: upstream state and what the engine does not give;
        `model`, the target's own `model:`, where its page names none (llama.cpp, TGI)."""
        parts = [f"{self.upstream} upstream"] if self.upstream else []
        if self.model_label is None and not model:
            parts.append("the page names no model: set the target's `model:` (its numbers are under model "
                         f'"{UNKNOWN_MODEL}")')
        absent = self.absent()
        if absent:
            parts.append("not on the engine's page: " + ", ".join(_ABSENT_WORDS[m] for m in absent))
        if "ttft" in absent:
            parts.append("the canary (client-side TTFT/TPOT) is this target's latency source")
        return "; ".join(parts)


UNKNOWN_MODEL = "unknown"  # the model of a target whose page names none and whose `model:` is unset


def spellings(name: str, prefix: str = "") -> tuple[str, ...]:
    """`name` as an exporter may write it: as is, and with ':' escaped to '_' (behind `prefix`)."""
    written = prefix + name
    return (written, written.replace(":", "_")) if ":" in written else (written,)


_PAGE_NAMES: dict[tuple[str, str, str], dict[str, str]] = {}


def _page_names(spec: EngineSpec, prefix: str) -> dict[str, str]:
    # One dict per (engine, prefix) for the process: the parser caches its work per dict object.
    key = (spec.engine, spec.generation, prefix)
    names = _PAGE_NAMES.get(key)
    if names is None:
        names = {spelled: name for name in sorted(spec.wanted) for spelled in spellings(name, prefix)}
        # A router's marker, read by the parse an engine's page takes anyway (`router_sample`).
        names.update({spelled: ROUTER_SAMPLE for marker in ROUTER_MARKERS for spelled in spellings(marker, prefix)})
        _PAGE_NAMES[key] = names
    return names


_ABSENT_WORDS = {"requests": "request count", "errors": "error ratio", "ttft": "TTFT quantiles",
                 "tpot": "TPOT quantiles", "e2e": "E2E quantiles", "queue": "queue-time quantiles"}

HTTP_LABELS = {
    # prometheus-fastapi-instrumentator's counter (vLLM): handler, status="2xx".."5xx".
    "http_requests_total": ("handler", "status"),
    # SGLang >= 0.5's own middleware: endpoint, status_code="200".."500" (its only error count).
    "sglang:http_responses_total": ("endpoint", "status_code"),
}
"""HTTP response counters -> (the label naming the route, the label holding the status)."""
HTTP_SAMPLES = tuple(HTTP_LABELS)
HTTP_API_PREFIX = "/v1/"

_VLLM_COUNTERS: dict[str, tuple[Selector, ...]] = {
    "requests": (Selector("vllm:request_success_total"),),
    "errors": (Selector("vllm:request_success_total", (("finished_reason", "error"),)),),
    "prompt_tokens": (Selector("vllm:prompt_tokens_total"),),
    "generation_tokens": (Selector("vllm:generation_tokens_total"),),
    "preemptions": (Selector("vllm:num_preemptions_total"),),
    # Finished because the client went away or cancelled: counted in requests, not an error.
    "aborts": (Selector("vllm:request_success_total", (("finished_reason", "abort"),)),),
}
# V0 never finishes a request with reason "error" (only stop/length; aborts are not counted), so
# it has no engine error count at all: absent, not a count that is always 0.
_VLLM_V0_COUNTERS = {name: s for name, s in _VLLM_COUNTERS.items() if name != "errors"}
# V1 only: prompt tokens looked up in / found in the local prefix cache (external_prefix_cache_*
# is a KV connector's cache, not counted here).
_VLLM_V1_PREFIX_CACHE = {
    "prefix_cache_hits": (Selector("vllm:prefix_cache_hits_total"),),
    "prefix_cache_queries": (Selector("vllm:prefix_cache_queries_total"),),
    # Speculative decoding (only with --speculative-config): steps, proposed and accepted tokens.
    "spec_drafts": (Selector("vllm:spec_decode_num_drafts_total"),),
    "spec_draft_tokens": (Selector("vllm:spec_decode_num_draft_tokens_total"),),
    "spec_accepted_tokens": (Selector("vllm:spec_decode_num_accepted_tokens_total"),),
}
SPEC_DECODE = frozenset({"spec_drafts", "spec_draft_tokens", "spec_accepted_tokens"})
# vLLM >= 0.32 only: the model's estimated work (for MFU: FLOPs and memory traffic per GPU, summed
# over the engines here) and the front end's admission rejections (--max-num-queued-reqs/-tokens:
# HTTP 503 to the client, never a finished request).
_VLLM_V1_WORK = {
    "estimated_flops": (Selector("vllm:estimated_flops_per_gpu_total"),),
    "estimated_read_bytes": (Selector("vllm:estimated_read_bytes_per_gpu_total"),),
    "estimated_write_bytes": (Selector("vllm:estimated_write_bytes_per_gpu_total"),),
    "admission_rejections": (Selector("vllm:admission_rejections_total"),),
}
# Accepted draft tokens per position in the draft (0 = the first proposed token): over the drafts,
# the chance that a draft's k-th token is accepted (it falls with k; where it falls to ~0, the
# later speculative tokens are wasted work).
_VLLM_PER_POSITION = {
    "spec_accepted_pos": (Selector("vllm:spec_decode_num_accepted_tokens_per_pos_total"), "position"),
    # Prefix-cache hit tokens by the tier that held them (device, host, disk, p2p, external_unspecified).
    "prompt_cached_by_source": (Selector("vllm:prompt_tokens_cached_by_source_total"), "source"),
}
_VLLM_GAUGES_COMMON = {
    "running": GaugeSpec(("vllm:num_requests_running",)),
    "waiting": GaugeSpec(("vllm:num_requests_waiting",)),
}

# Per data-parallel rank (vLLM's `engine` label): the sum over ranks hides one hot rank.
_VLLM_RANK_GAUGES = {
    "rank_running": GaugeSpec(("vllm:num_requests_running",), by="engine"),
    "rank_waiting": GaugeSpec(("vllm:num_requests_waiting",), by="engine"),
}

# KV-cache tiers, P/D transfer and MoE balance (docs/engines.md, "Tiers, P/D and MoE"). Our names
# carry the tier after a '/' ("kv_load/host"); the derivation and the render split on it. A fixed
# tier where the engine has one (vLLM's CPU offloading connector, SGLang's HiCache host pool: "host"),
# the engine's own `tier` label where it has several (vLLM's multi-tier offloading: "1:fs", ...).
def _offload(ours: str, split: str, transfer_type: str) -> tuple[Selector, Selector]:
    """One of vLLM's OffloadingConnector families: its split load/store spelling (later releases) and
    the older one labelled by transfer_type, which the CPU tier goes on printing beside it: alternatives
    (`first_of`), the split one first."""
    by_type = (("transfer_type", transfer_type),)
    return Selector(f"vllm:kv_offload_{ours}"), Selector(f"vllm:kv_offload_{split}", by_type)


_VLLM_KV_TIERS: dict[str, tuple[Selector, ...]] = {
    "kv_load_bytes/host": _offload("load_bytes_total", "total_bytes_total", "CPU_to_GPU"),
    "kv_store_bytes/host": _offload("store_bytes_total", "total_bytes_total", "GPU_to_CPU"),
    "kv_load_time/host": _offload("load_time_total", "total_time_total", "CPU_to_GPU"),
    # Loads: the transfer-size histogram's count (one observation per transfer).
    "kv_loads/host": _offload("load_size_count", "size_count", "CPU_to_GPU"),
    # A KV connector's cross-instance cache (LMCache, NIXL P2P): prompt tokens looked up / found.
    "external_prefix_hits": (Selector("vllm:external_prefix_cache_hits_total"),),
    "external_prefix_queries": (Selector("vllm:external_prefix_cache_queries_total"),),
    # P/D over NIXL (the decode side pulls the prefill's KV): time and bytes per transfer, failures.
    "pd_transfer_seconds_sum": (Selector("vllm:nixl_xfer_time_seconds_sum"),),
    "pd_transfer_count": (Selector("vllm:nixl_xfer_time_seconds_count"),),
    "pd_transfer_bytes": (Selector("vllm:nixl_bytes_transferred_sum"),),
    "pd_transfer_failures": (Selector("vllm:nixl_num_failed_transfers_total"),),
    "ttft_sum": (Selector("vllm:time_to_first_token_seconds_sum"),),
    "ttft_count": (Selector("vllm:time_to_first_token_seconds_count"),),
}
_PD_ONLY = {"ttft_sum": "pd_transfer_count", "ttft_count": "pd_transfer_count"}
# Multi-tier offloading (vllm/v1/kv_offload/tiering): per `tier` ("0:primary" is the CPU tier the
# others promote into, "1:<type>" the first secondary tier); reads are loads toward the GPU.
_VLLM_TIERING = {
    "kv_tier_hits": (Selector("vllm:kv_offload_tiering_chunk_hits_total"), "tier"),
    "kv_tier_queries": (Selector("vllm:kv_offload_tiering_chunk_queries_total"), "tier"),
    "kv_load_bytes": (Selector("vllm:kv_offload_tiering_read_bytes_total"), "tier"),
    "kv_store_bytes": (Selector("vllm:kv_offload_tiering_write_bytes_total"), "tier"),
    "kv_load_time": (Selector("vllm:kv_offload_tiering_read_time_total"), "tier"),
}

VLLM_V1 = EngineSpec(
    engine="vllm",
    generation="v1",
    markers=("vllm:kv_cache_usage_perc",),
    model_label="model_name",
    counters={**_VLLM_COUNTERS, **_VLLM_V1_PREFIX_CACHE, **_VLLM_V1_WORK, **_VLLM_KV_TIERS},
    counters_by={**_VLLM_PER_POSITION, **_VLLM_TIERING},
    histograms={
        "ttft": ("vllm:time_to_first_token_seconds",),
        # Per-request time per output token; older V1 pages only have the inter-token latency
        # (named time_per_output_token_seconds before it was renamed).
        "tpot": (
            "vllm:request_time_per_output_token_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
        # Where a request's time goes after the queue: prefill, decode, and both (inference).
        "prefill": ("vllm:request_prefill_time_seconds",),
        "decode": ("vllm:request_decode_time_seconds",),
        "inference": ("vllm:request_inference_time_seconds",),
        "prompt_len": ("vllm:request_prompt_tokens",),
        "generation_len": ("vllm:request_generation_tokens",),
        # Times each finished request was preempted (>= 0.32; its first bucket is le="1").
        "request_preemptions": ("vllm:request_num_preemptions",),
        # NIXL's transfer time (P/D decode side; buckets 5 ms .. 5 s). The CPU offloading connector
        # has no latency histogram: its mean time per transfer is the counters' ratio.
        "pd_transfer": ("vllm:nixl_xfer_time_seconds",),
    },
    gauges={
        **_VLLM_GAUGES_COMMON,
        "kv_cache": GaugeSpec(("vllm:kv_cache_usage_perc",), combine="max"),
        **_VLLM_RANK_GAUGES,
        "rank_kv_cache": GaugeSpec(("vllm:kv_cache_usage_perc",), combine="max", by="engine"),
        # Why requests wait (0.33): "capacity" (no KV blocks free) or "deferred" (the scheduler held
        # them back: a budget, a LoRA slot, a structured-output grammar still compiling).
        "waiting_by_reason": GaugeSpec(("vllm:num_requests_waiting_by_reason",), by="reason"),
        # Sleep mode (--enable-sleep-mode): one series per state, 1.0 on the engine's current one.
        "sleep_state": GaugeSpec(("vllm:engine_sleep_state",), by="sleep_state"),
    },
    # Speculative decoding only when configured; waiting reasons and sleep states from 0.33 on; KV
    # offloading and P/D with a KV connector only.
    only_with=_PD_ONLY,
    first_of=frozenset(key for key, selectors in _VLLM_KV_TIERS.items() if len(selectors) > 1),
    optional=SPEC_DECODE | frozenset(_VLLM_V1_WORK) | frozenset(_VLLM_KV_TIERS) | {"pd_transfer"}
    | {"waiting_by_reason", "sleep_state", "request_preemptions"},
    lora_info="vllm:lora_requests_info",
    notes=(
        "vLLM >= 0.9.2 (kv_cache_usage_perc): labels engine + model_name; one API server: _created "
        "samples; --api-server-count > 1: multiprocess layout, and 0.11.0 keeps kv_cache_usage_perc "
        "per pid (one process holds the value, the others 0.0: max them). Finish reason 'error' "
        "exists only in later releases; --show-hidden-metrics-for-version adds the V0 names too."
    ),
)

VLLM_V0 = EngineSpec(
    engine="vllm",
    generation="v0",
    markers=("vllm:gpu_cache_usage_perc",),
    model_label="model_name",
    counters=_VLLM_V0_COUNTERS,
    histograms={
        "ttft": ("vllm:time_to_first_token_seconds",),
        # V0's only per-token histogram is the inter-token latency under its old name.
        "tpot": (
            "vllm:request_time_per_output_token_seconds",
            "vllm:time_per_output_token_seconds",
            "vllm:inter_token_latency_seconds",
        ),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
        # Where a request's time goes after the queue: prefill, decode, and both (inference).
        "prefill": ("vllm:request_prefill_time_seconds",),
        "decode": ("vllm:request_decode_time_seconds",),
        "inference": ("vllm:request_inference_time_seconds",),
        "prompt_len": ("vllm:request_prompt_tokens",),
        "generation_len": ("vllm:request_generation_tokens",),
    },
    gauges={
        **_VLLM_GAUGES_COMMON,
        "kv_cache": GaugeSpec(("vllm:gpu_cache_usage_perc",), combine="max"),
    },
    notes=(
        "vLLM V0 (0.6.x, vllm/engine/metrics.py): label model_name only; the default multiprocessing "
        "front end serves a MultiProcessCollector page (no _created, gauges summed, no pid). Early V1 "
        "(0.8-0.9.1) still named the KV gauge gpu_cache_usage_perc and lands here too (+ engine label). "
        "V0 was removed upstream in 0.11; current vLLM has no gpu_cache_usage_perc."
    ),
    upstream="legacy",
)

_SGLANG_KV_TIERS: dict[str, tuple[Selector, ...]] = {
    # HiCache: tokens (and, in later releases, bytes) moved host -> GPU and GPU -> host.
    "kv_load_tokens/host": (Selector("sglang:load_back_tokens_total"),),
    "kv_load_bytes/host": (Selector("sglang:load_back_bytes_total"),),
    "kv_store_tokens/host": (Selector("sglang:hicache_backup_tokens_total"),),
    "kv_store_bytes/host": (Selector("sglang:hicache_backup_bytes_total"),),
    "kv_evicted_tokens/host": (Selector("sglang:evicted_tokens_total"),),
    # Operations: the duration histograms' counts; time: their sums.
    "kv_loads/host": (Selector("sglang:load_back_duration_seconds_count"),),
    "kv_load_time/host": (Selector("sglang:load_back_duration_seconds_sum"),),
    "kv_evictions/host": (Selector("sglang:eviction_duration_seconds_count"),),
    # P/D: failed transfers and bootstraps (both lose the request's KV), mean transfer time in ms.
    "pd_transfer_failures": (Selector("sglang:num_transfer_failed_reqs_total"),
                             Selector("sglang:num_bootstrap_failed_reqs_total")),
    "pd_transfer_ms_sum": (Selector("sglang:kv_transfer_latency_ms_sum"),),
    "pd_transfer_count": (Selector("sglang:kv_transfer_latency_ms_count"),),
    "ttft_sum": (Selector("sglang:time_to_first_token_seconds_sum"),),
    "ttft_count": (Selector("sglang:time_to_first_token_seconds_count"),),
    # EPLB (SGLANG_ENABLE_EPLB_BALANCEDNESS_METRIC): a Summary per forward mode, mean over layers
    # of mean / max load per GPU; its sum over its count is the window's mean balancedness.
    "moe_balancedness_sum": (Selector("sglang:eplb_balancedness_sum"),),
    "moe_balancedness_count": (Selector("sglang:eplb_balancedness_count"),),
}

SGLANG = EngineSpec(
    engine="sglang",
    generation="v0.4+",
    # Scheduler gauges appear after the first batch, tokenizer counters after the first finished
    # request, max_total_num_tokens (newer releases) at start-up.
    markers=(
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:num_requests_total",
        "sglang:max_total_num_tokens",
    ),
    model_label="model_name",
    counters={
        # Every finished request, aborted ones included (0.5.23: the tokenizer counts a request
        # when it finishes, whatever the reason; aborts are also in num_aborted_requests_total),
        # as vLLM's request_success_total counts finished_reason="abort".
        "requests": (Selector("sglang:num_requests_total"),),
        "prompt_tokens": (Selector("sglang:prompt_tokens_total"),),
        # Prompt tokens served from the radix cache (device, host or storage tier) of all prompt
        # tokens: the same ratio as vLLM's prefix-cache hits / queries.
        "prefix_cache_hits": (Selector("sglang:cached_tokens_total"),),
        "prefix_cache_queries": (Selector("sglang:prompt_tokens_total"),),
        "generation_tokens": (Selector("sglang:generation_tokens_total"),),
        # Retractions are SGLang's preemptions; the counter exists in recent releases only and
        # appears after the first retraction (the older num_retracted_reqs is a per-interval gauge).
        "preemptions": (Selector("sglang:num_retracted_requests_total"),),
        "aborts": (Selector("sglang:num_aborted_requests_total"),),
        **_SGLANG_KV_TIERS,
    },
    histograms={
        "ttft": ("sglang:time_to_first_token_seconds",),
        # Per-request TPOT where the release has it (0.5.x: (finish - first token) / (tokens - 1),
        # as vLLM's); else the inter-token latency (older releases: time_per_output_token_seconds).
        "tpot": (
            "sglang:request_time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        "e2e": ("sglang:e2e_request_latency_seconds",),
        "queue": ("sglang:queue_time_seconds",),
        "prompt_len": ("sglang:prompt_tokens_histogram",),
        "generation_len": ("sglang:generation_tokens_histogram",),
        # HiCache (--enable-hierarchical-cache): host memory -> GPU (load back), GPU -> host (the
        # write-through backup of later releases, else the eviction's copy); buckets 1 ms .. 1 s.
        "kv_load/host": ("sglang:load_back_duration_seconds",),
        "kv_store/host": ("sglang:hicache_backup_duration_seconds", "sglang:eviction_duration_seconds"),
        # P/D (--disaggregation-mode): one KV transfer, in ms (a gauge in releases before 0.5).
        "pd_transfer": ("sglang:kv_transfer_latency_ms",),
    },
    histogram_scale={"pd_transfer": 1e-3},
    only_with=_PD_ONLY,
    gauges={
        # One series per data-parallel rank (dp_rank): replicas, summed.
        "running": GaugeSpec(("sglang:num_running_reqs",)),
        "waiting": GaugeSpec(("sglang:num_queue_reqs",)),
        # Used/total of the fullest KV pool (full, SWA or mamba), 0-1.
        "kv_cache": GaugeSpec(("sglang:token_usage",), combine="max"),
        "rank_running": GaugeSpec(("sglang:num_running_reqs",), by="dp_rank"),
        "rank_waiting": GaugeSpec(("sglang:num_queue_reqs",), by="dp_rank"),
        "rank_kv_cache": GaugeSpec(("sglang:token_usage",), combine="max", by="dp_rank"),
        # Speculative decoding as the scheduler computes it over its last logging interval (no
        # counters to rate): mean accepted length per step and accepted / drafted, averaged over ranks.
        "spec_accept_length": GaugeSpec(("sglang:spec_accept_length",), combine="mean"),
        "spec_accept_rate": GaugeSpec(("sglang:spec_accept_rate",), combine="mean"),
        # HiCache's host pool: tokens held and its capacity, summed over ranks (usage = used / total).
        "kv_tier_used/host": GaugeSpec(("sglang:hicache_host_used_tokens",)),
        "kv_tier_capacity/host": GaugeSpec(("sglang:hicache_host_total_tokens",)),
    },
    # With speculative decoding, HiCache, P/D or EPLB only.
    optional=frozenset({"spec_accept_length", "spec_accept_rate", "kv_load/host", "kv_store/host", "pd_transfer",
                        "kv_tier_used/host", "kv_tier_capacity/host", *_SGLANG_KV_TIERS}),
    notes=(
        "sgl-project/sglang srt/metrics/collector.py (now srt/observability/metrics_collector.py); "
        "always prometheus multiprocess mode. Scheduler labels model_name, engine_type, tp_rank, "
        "pp_rank, moe_ep_rank, dp_rank; only attn_tp_rank 0 reports unless "
        "--enable-metrics-for-all-schedulers (then TP ranks repeat one batch: sums over-count). "
        "No engine error counter (PD mode only: num_bootstrap/transfer_failed_reqs_total): errors "
        "are the API's HTTP 5xx responses, sglang:http_responses_total{endpoint, status_code}."
    ),
)

# err values of tgi_request_failure that are the client's doing, rejected before the queue.
_TGI_REJECTED = (("err", "validation"), ("err", "template"))

TGI = EngineSpec(
    engine="tgi",
    generation="v1+",
    # max_total_tokens is set at start-up (v3 backend); the others after the first request.
    markers=("tgi_batch_max_total_tokens", "tgi_queue_size", "tgi_batch_current_size", "tgi_request_success"),
    model_label=None,
    counters={
        # tgi_request_count is no request count: OpenAI-API handlers count each request twice
        # and /tokenize counts too. Finished = succeeded + failed after admission.
        "requests": (
            Selector("tgi_request_success"),
            Selector("tgi_request_failure", exclude=_TGI_REJECTED),
        ),
        # generation / incomplete / overloaded; "dropped" is the client going away.
        "errors": (Selector("tgi_request_failure", exclude=(("err", "dropped"), *_TGI_REJECTED)),),
        # Histogram sums used as counters: input length is recorded for every validated request,
        # generated tokens only when a request succeeds.
        "prompt_tokens": (Selector("tgi_request_input_length_sum"),),
        "generation_tokens": (Selector("tgi_request_generated_tokens_sum"),),
    },
    histograms={
        # No time-to-first-token histogram exists in TGI.
        "tpot": ("tgi_request_mean_time_per_token_duration",),
        "e2e": ("tgi_request_duration",),
        "queue": ("tgi_request_queue_duration",),
        "prompt_len": ("tgi_request_input_length",),
        "generation_len": ("tgi_request_generated_tokens",),
    },
    gauges={
        "running": GaugeSpec(("tgi_batch_current_size",)),
        "waiting": GaugeSpec(("tgi_queue_size",)),
    },
    process_labels=(),
    notes=(
        "huggingface/text-generation-inference router/src/server.rs + backends/v3 via the Rust "
        "metrics-exporter-prometheus: counters without _total, no model label, no KV-cache gauge, "
        "no preemption counter; counters appear on first increment. Archived upstream in 2026: "
        "the table is kept for running deployments and not grown."
    ),
    upstream="archived, frozen",
)

LLAMACPP = EngineSpec(
    engine="llamacpp",
    generation="server",
    # Every counter and gauge is on the page from start-up (llama-server --metrics).
    markers=("llamacpp:prompt_tokens_total", "llamacpp:requests_processing"),
    model_label=None,  # no labels at all: the model is the target's `model:`
    counters={
        # prompt_tokens_total excludes the tokens reused from the slot's cache; ours counts all.
        "prompt_tokens": (Selector("llamacpp:prompt_tokens_total"), Selector("llamacpp:prompt_tokens_cached_total")),
        "generation_tokens": (Selector("llamacpp:tokens_predicted_total"),),
        "prefix_cache_hits": (Selector("llamacpp:prompt_tokens_cached_total"),),
        "prefix_cache_queries": (
            Selector("llamacpp:prompt_tokens_total"),
            Selector("llamacpp:prompt_tokens_cached_total"),
        ),
        # Busy time of prompt processing and generation, summed over finished tasks: with the
        # token counters, mean seconds per computed prompt token and per generated token.
        "prompt_tokens_computed": (Selector("llamacpp:prompt_tokens_total"),),
        "prompt_seconds": (Selector("llamacpp:prompt_seconds_total"),),
        "generation_seconds": (Selector("llamacpp:tokens_predicted_seconds_total"),),
        # Speculative decoding (-md draft model): always on the page, 0 without a draft model.
        "spec_drafts": (Selector("llamacpp:spec_decode_num_drafts_total"),),
        "spec_draft_tokens": (Selector("llamacpp:spec_decode_num_draft_tokens_total"),),
        "spec_accepted_tokens": (Selector("llamacpp:spec_decode_num_accepted_tokens_total"),),
    },
    histograms={},
    gauges={
        "running": GaugeSpec(("llamacpp:requests_processing",)),
        "waiting": GaugeSpec(("llamacpp:requests_deferred",)),
    },
    process_labels=(),
    notes=(
        "ggml-org/llama.cpp tools/server (llama-server --metrics): no labels, no request or error "
        "counter, no latency histogram. The *_tokens_seconds gauges are throughput since the previous "
        "read of /metrics (each read resets them): never rates; the *_seconds_total counters are used."
    ),
)

DYNAMO_FRONTEND = EngineSpec(
    engine="dynamo",
    generation="frontend",
    # Routers in front of the engines: a fleet behind NVIDIA Dynamo's OpenAI frontend is read in the
    # same schema (its workers' own pages are vLLM's, SGLang's or TRT-LLM's, each a target of its own).
    markers=("dynamo_frontend_inflight_requests", "dynamo_frontend_queued_requests", "dynamo_frontend_requests_total"),
    model_label="model",
    counters={
        # Counted when a request's response ends: status "success" or "error" (a client that went
        # away is error_type="cancelled" in later releases: not the engine's error).
        "requests": (Selector("dynamo_frontend_requests_total"),),
        "errors": (Selector("dynamo_frontend_requests_total", (("status", "error"),), (("error_type", "cancelled"),)),),
        "generation_tokens": (Selector("dynamo_frontend_output_tokens_total"),),
        "prompt_tokens": (Selector("dynamo_frontend_input_sequence_tokens_sum"),),
    },
    histograms={
        "ttft": ("dynamo_frontend_time_to_first_token_seconds",),
        # The inter-token latency (ITL): the frontend has no per-request TPOT.
        "tpot": ("dynamo_frontend_inter_token_latency_seconds",),
        "e2e": ("dynamo_frontend_request_duration_seconds",),
        "prompt_len": ("dynamo_frontend_input_sequence_tokens",),
        "generation_len": ("dynamo_frontend_output_sequence_tokens",),
    },
    gauges={
        "running": GaugeSpec(("dynamo_frontend_inflight_requests",)),
        # From the handler's start to the first token (prefill included): waiting for service.
        "waiting": GaugeSpec(("dynamo_frontend_queued_requests",)),
    },
    process_labels=(),
    optional=frozenset({"generation_tokens"}),  # output_tokens_total: later releases
    notes=(
        "ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs (the Rust prometheus crate): label model; "
        "histograms on log-spaced buckets rounded to 2 significant figures (DYN_METRICS_<NAME>_{MIN,MAX,COUNT}); "
        "DYN_METRICS_PREFIX renames the families (a target's metric_prefix does not cover that)."
    ),
)

GAIE_EPP = EngineSpec(
    engine="gaie-epp",
    generation="v1",
    # The Gateway API Inference Extension's endpoint picker (llm-d's router): per InferenceObjective
    # (`model_name`, the model asked for; `target_model_name`, the one served), and per pool.
    markers=("inference_objective_request_total", "inference_model_request_total", "inference_pool_ready_pods"),
    model_label="model_name",
    counters={
        # inference_model_* before the InferenceModel API became InferenceObjective (never both).
        "requests": (Selector("inference_objective_request_total"), Selector("inference_model_request_total")),
        "errors": (Selector("inference_objective_request_error_total"),
                   Selector("inference_model_request_error_total")),
        "prompt_tokens": (Selector("inference_objective_input_tokens_sum"),),
        "generation_tokens": (Selector("inference_objective_output_tokens_sum"),),
    },
    histograms={
        # NTPOT: the request's latency over its output tokens (TTFT included): the router's TPOT.
        "tpot": ("inference_objective_normalized_time_per_output_token_seconds",),
        "e2e": ("inference_objective_request_duration_seconds", "inference_model_request_duration_seconds"),
        "prompt_len": ("inference_objective_input_tokens",),
        "generation_len": ("inference_objective_output_tokens",),
    },
    gauges={
        "running": GaugeSpec(("inference_objective_running_requests",)),
        # Requests queued on the pool's model servers (no model label: the target's `model`).
        "waiting": GaugeSpec(("inference_pool_per_pod_queue_size",)),
    },
    process_labels=(),
    optional=frozenset({"waiting", "prompt_tokens", "generation_tokens", "prompt_len", "generation_len"}),
    notes=(
        "kubernetes-sigs/gateway-api-inference-extension pkg/epp/metrics (client_golang): no TTFT (the "
        "canary gives it); requests are counted on arrival, errors per error_code; response metrics "
        "need the response body (Buffered or Streamed body mode, include_usage for streamed vLLM)."
    ),
)

ENGINES: list[EngineSpec] = [VLLM_V1, VLLM_V0, SGLANG, TGI, LLAMACPP, DYNAMO_FRONTEND, GAIE_EPP]


ROUTER_MARKERS = ("vllm:current_qps",)
"""vLLM production-stack's router publishes per-backend numbers under the engine's prefix
(`vllm:current_qps{server}`, `vllm:avg_latency{server}`, ...): a router page, never an engine's."""


ROUTER_SAMPLE = "router marker"
"""The name a page's router marker sample (any spelling) is filed under by `page_names`' parse:
no engine table reads a name with a blank in it."""


def router_sample(page: Page) -> bool:
    """`is_router` on a page parsed with `page_names`: where the page was detected as an engine's,
    its parse has read the markers, and the whole text need not be scanned for them again."""
    return ROUTER_SAMPLE in page.samples


def is_router(text: str, prefix: str = "") -> bool:
    # Every spelling holds the marker's name after its last ':' ("current_qps"): one scan of the
    # page rules out an engine's page, where four (two spellings, two line forms) were a visible
    # part of a large page's scrape (docs/measurements.md, fifth stop).
    return any(m.rpartition(":")[2] in text and any(_has_sample(text, s) for s in spellings(m, prefix))
               for m in ROUTER_MARKERS)


def engine_names() -> list[str]:
    """The engines a target may pin (`engine: vllm`), in table order."""
    return list(dict.fromkeys(spec.engine for spec in ENGINES))


def unknown_engine(engine: str | None) -> str | None:
    """Why a pinned `engine:` cannot be used, or None when the engine tables know it (or none is pinned)."""
    if engine is None or engine in (known := engine_names()):
        return None
    return f"unknown engine: one of {', '.join(known)}"


def find_engine(engine: str, generation: str) -> EngineSpec | None:
    return next((s for s in ENGINES if s.engine == engine and s.generation == generation), None)


def detect(text: str, prefix: str = "", engine: str | None = None) -> EngineSpec | None:
    """The engine whose marker sample appears on the page (either spelling); substring checks only.
    A pinned `engine` is looked for among its own generations only."""
    for spec in ENGINES:
        if engine is not None and spec.engine != engine:
            continue
        for marker in spec.marker_spellings(prefix):
            if _has_sample(text, marker):
                return spec
    return None


def _has_sample(text: str, name: str) -> bool:
    if name not in text:  # most names looked for are absent: one scan of the page, not two
        return False
    return f"\n{name}{{" in text or f"\n{name} " in text or text.startswith((f"{name}{{", f"{name} "))


def suggest_prefix(text: str) -> str | None:
    """A prefix behind which the page holds an engine's names (`kserve_`), when it has them only so."""
    for spec in ENGINES:
        for marker in spec.marker_spellings():
            found = re.search(rf"(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*?){re.escape(marker)}[{{ ]", text)
            if found and found.group(1):
                return found.group(1)
    return None
