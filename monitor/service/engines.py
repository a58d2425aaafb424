"""Serving engines as data: how each engine (and each renamed generation of it) names what we export.

Adding an engine is adding an `EngineSpec` to `ENGINES` and a fixture page under
tests/fixtures/pages/; nothing else switches on the engine. Names are the *sample* names as they
appear on the page (`vllm:prompt_tokens_total`, TGI's suffix-less `tgi_request_count`).

Our metrics:
    counters    requests (all finished), errors (finished with an engine error), prompt_tokens,
                generation_tokens, preemptions
    histograms  ttft, tpot, e2e, queue  (base family names; `_bucket` is appended)
    gauges      running, waiting, kv_cache
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.promtext import Labels

Match = tuple[tuple[str, str], ...]
"""Label equality matchers a sample must satisfy, e.g. (("finished_reason", "error"),)."""


@dataclass(frozen=True)
class Selector:
    sample: str
    match: Match = ()
    exclude: Match = ()  # label values that do not count (e.g. TGI's aborted-by-client)

    def accepts(self, labels: Labels) -> bool:
        values = dict(labels)
        if any(values.get(k) != v for k, v in self.match):
            return False
        return not any(values.get(k) == v for k, v in self.exclude)


@dataclass(frozen=True)
class GaugeSpec:
    candidates: tuple[str, ...]  # first one present on the page wins
    # How series of one model combine: "sum" across engines/ranks (requests running),
    # "max" for ratios (the fullest KV cache is the one that preempts). Series that differ
    # only in a per-process label (`pid`) are copies of one engine value: max'ed first.
    combine: str = "sum"
    scale: float = 1.0


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
    wanted: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names: set[str] = set(HTTP_SAMPLES)
        for selectors in self.counters.values():
            names.update(s.sample for s in selectors)
        for candidates in self.histograms.values():
            names.update(f"{base}_bucket" for base in candidates)
        for gauge in self.gauges.values():
            names.update(gauge.candidates)
        object.__setattr__(self, "wanted", frozenset(names))


HTTP_SAMPLES = ("http_requests_total",)
"""prometheus-fastapi-instrumentator's counter (vLLM, SGLang): status="2xx".."5xx", handler."""
HTTP_API_PREFIX = "/v1/"

_VLLM_COUNTERS: dict[str, tuple[Selector, ...]] = {
    "requests": (Selector("vllm:request_success_total"),),
    "errors": (Selector("vllm:request_success_total", (("finished_reason", "error"),)),),
    "prompt_tokens": (Selector("vllm:prompt_tokens_total"),),
    "generation_tokens": (Selector("vllm:generation_tokens_total"),),
    "preemptions": (Selector("vllm:num_preemptions_total"),),
}
_VLLM_GAUGES_COMMON = {
    "running": GaugeSpec(("vllm:num_requests_running",)),
    "waiting": GaugeSpec(("vllm:num_requests_waiting",)),
}

VLLM_V1 = EngineSpec(
    engine="vllm",
    generation="v1",
    markers=("vllm:kv_cache_usage_perc",),
    model_label="model_name",
    counters=_VLLM_COUNTERS,
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
    },
    gauges={
        **_VLLM_GAUGES_COMMON,
        "kv_cache": GaugeSpec(("vllm:kv_cache_usage_perc",), combine="max"),
    },
    notes="vLLM >= 0.10: labels engine + model_name, counters with _created samples",
)

VLLM_V0 = EngineSpec(
    engine="vllm",
    generation="v0",
    markers=("vllm:gpu_cache_usage_perc",),
    model_label="model_name",
    counters=_VLLM_COUNTERS,
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
    },
    gauges={
        **_VLLM_GAUGES_COMMON,
        "kv_cache": GaugeSpec(("vllm:gpu_cache_usage_perc",), combine="max"),
    },
    notes="vLLM V0 and multiprocess (multi-API-server) pages: no engine label, pid on gauges",
)

ENGINES: list[EngineSpec] = [VLLM_V1, VLLM_V0]


def detect(text: str) -> EngineSpec | None:
    """The engine whose marker sample appears on the page; cheap substring checks only."""
    for spec in ENGINES:
        for marker in spec.markers:
            if f"\n{marker}{{" in text or f"\n{marker} " in text or text.startswith(marker):
                return spec
    return None
