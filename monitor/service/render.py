"""ServiceView -> metric families (fresh each scrape of /metrics; no I/O, no state kept)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client.core import Metric

from monitor.catalog import family
from monitor.exporter import TextWriter, header
from monitor.service.derive import WindowStats, rank_imbalance
from monitor.service.view import ServiceView, TargetLines, TargetView

# Our metric -> WindowStats attribute, for the plain per-window gauges.
_WINDOW_GAUGES = {
    "inference_requests_per_second": "requests_per_second",
    "inference_request_error_ratio": "error_ratio",
    "inference_prompt_tokens_per_second": "prompt_tokens_per_second",
    "inference_generation_tokens_per_second": "generation_tokens_per_second",
    "inference_preemptions_per_second": "preemptions_per_second",
    "inference_aborted_requests_per_second": "aborted_requests_per_second",
    "inference_throughput_baseline_ratio": "throughput_baseline_ratio",
    "inference_prefix_cache_hit_ratio": "prefix_cache_hit_ratio",
    "inference_prompt_seconds_per_token": "prompt_seconds_per_token",
    "inference_generation_seconds_per_token": "generation_seconds_per_token",
    "inference_spec_decode_acceptance_ratio": "spec_decode_acceptance_ratio",
    "inference_spec_decode_acceptance_length": "spec_decode_acceptance_length",
    "inference_prefix_cache_hit_ratio_baseline": "prefix_cache_hit_ratio_baseline",
    "inference_prefix_cache_hit_baseline_ratio": "prefix_cache_hit_baseline_ratio",
    "inference_spec_decode_acceptance_ratio_baseline": "spec_decode_acceptance_ratio_baseline",
    "inference_spec_decode_acceptance_baseline_ratio": "spec_decode_acceptance_baseline_ratio",
    "inference_estimated_flops_per_second": "estimated_flops_per_second",
    "inference_estimated_memory_read_bytes_per_second": "estimated_read_bytes_per_second",
    "inference_estimated_memory_write_bytes_per_second": "estimated_write_bytes_per_second",
    "inference_admission_rejections_per_second": "admission_rejections_per_second",
    "inference_external_prefix_cache_hit_ratio": "external_prefix_cache_hit_ratio",
    "inference_moe_expert_balancedness_ratio": "moe_expert_balancedness_ratio",
    "inference_pd_transfer_failures_per_second": "pd_transfer_failures_per_second",
    "inference_pd_transfer_bytes_per_second": "pd_transfer_bytes_per_second",
    "inference_pd_transfer_ttft_share_ratio": "pd_transfer_ttft_share_ratio",
}
# Per KV tier (WindowStats.kv_tiers): our metric -> the tier's number
_TIER_GAUGES = {
    "inference_kv_tier_load_bytes_per_second": "load_bytes_per_second",
    "inference_kv_tier_store_bytes_per_second": "store_bytes_per_second",
    "inference_kv_tier_load_tokens_per_second": "load_tokens_per_second",
    "inference_kv_tier_store_tokens_per_second": "store_tokens_per_second",
    "inference_kv_tier_loads_per_second": "loads_per_second",
    "inference_kv_tier_evictions_per_second": "evictions_per_second",
    "inference_kv_tier_hit_ratio": "hit_ratio",
    "inference_kv_tier_load_mean_seconds": "load_mean_seconds",
    "inference_kv_tier_reload_ratio": "reload_ratio",
}
# Latency quantiles per KV tier: our summary -> the histogram kind ("kv_load/<tier>")
_TIER_SUMMARIES = {"inference_kv_tier_load_seconds": "kv_load", "inference_kv_tier_store_seconds": "kv_store"}
_SUMMARIES = {
    "inference_ttft_seconds": "ttft",
    "inference_tpot_seconds": "tpot",
    "inference_e2e_latency_seconds": "e2e",
    "inference_queue_time_seconds": "queue",
    "inference_prefill_time_seconds": "prefill",
    "inference_decode_time_seconds": "decode",
    "inference_request_inference_time_seconds": "inference",
    "inference_request_preemptions": "request_preemptions",
    "inference_pd_transfer_seconds": "pd_transfer",
}
_TARGET_GAUGES = {
    "inference_requests_running": "running",
    "inference_requests_waiting": "waiting",
    "inference_kv_cache_usage_ratio": "kv_cache",
    "inference_spec_decode_engine_acceptance_length": "spec_accept_length",
    "inference_spec_decode_engine_acceptance_ratio": "spec_accept_rate",
}
# Gauges kept per one more label: our metric -> (engine-table gauge, our label)
_LABELLED_GAUGES = {
    "inference_rank_requests_running": ("rank_running", "rank"),
    "inference_rank_requests_waiting": ("rank_waiting", "rank"),
    "inference_rank_kv_cache_usage_ratio": ("rank_kv_cache", "rank"),
    "inference_requests_waiting_by_reason": ("waiting_by_reason", "reason"),
    "inference_engine_sleep_state": ("sleep_state", "state"),
}


class Family(Protocol):
    """What the render fills: a `prometheus_client` family, or `_TextFamily` (lines at once)."""

    @property
    def name(self) -> str: ...

    @property
    def samples(self) -> Sized: ...

    def add_sample(self, name: str, labels: dict[str, str], value: float) -> None: ...


F = TypeVar("F", bound=Family)


def render_service(view: ServiceView) -> Iterator[Metric]:
    return _render(view, family)


def _render(view: ServiceView, family: Callable[[str], F]) -> Iterator[F]:
    up = family("inference_target_up")
    stale = family("inference_target_stale")
    stale_count = family("inference_monitor_stale_targets")
    refused = family("inference_target_refused")
    recognized = family("inference_target_engine_recognized")
    info = family("inference_target_info")
    for name, target in view.targets.items():
        if target.waiting:
            continue  # no scrape has finished: no `up` yet, as in Prometheus before its first scrape
        # `up` is what Prometheus means: the last scrape succeeded. A target the monitor fell
        # behind on is stale, not down: one alert about the monitor, not one TargetDown per engine.
        up.add_sample("inference_target_up", {"target": name}, 1.0 if target.up or target.stale else 0.0)
        stale.add_sample("inference_target_stale", {"target": name}, 1.0 if target.stale else 0.0)
        refused.add_sample("inference_target_refused", {"target": name}, 1.0 if target.refused else 0.0)
        if target.up:
            recognized.add_sample("inference_target_engine_recognized", {"target": name},
                                  1.0 if target.recognized else 0.0)
        if target.engine:
            info.add_sample(
                "inference_target_info",
                {"target": name, "engine": target.engine, "generation": target.generation or "",
                 **({"version": target.version} if target.version else {})},
                1.0,
            )
    stale_count.add_sample("inference_monitor_stale_targets", {"collector": "service"},
                           float(sum(1 for target in view.targets.values() if target.stale)))
    yield up
    yield stale
    yield refused
    yield stale_count
    yield recognized
    yield info

    rows: list[tuple[dict[str, str], WindowStats]] = []
    for name, target in view.targets.items():
        for (model, window), stats in sorted(target.stats.items()):
            rows.append(({"target": name, "model": model, "window": window}, stats))
    for (model, window), stats in sorted(view.fleet.items()):
        rows.append(({"model": model, "window": window}, stats))

    for metric, attribute in _WINDOW_GAUGES.items():
        fam = family(metric)
        for labels, stats in rows:
            value = getattr(stats, attribute)
            if value is not None:
                fam.add_sample(metric, labels, value)
        yield fam
    for metric, key in _SUMMARIES.items():
        fam = family(metric)
        for labels, stats in rows:
            for q, value in stats.quantiles.get(key, {}).items():
                fam.add_sample(metric, {**labels, "quantile": f"{q:g}"}, value)
        yield fam
    yield _slo(rows, family)
    positions = family("inference_spec_decode_position_acceptance_ratio")
    for labels, stats in rows:
        for position, share in sorted(stats.spec_decode_position_acceptance.items(), key=lambda p: _position(p[0])):
            positions.add_sample("inference_spec_decode_position_acceptance_ratio", {**labels, "position": position},
                                 share)
    yield positions
    cached = family("inference_prompt_tokens_cached_per_second")
    for labels, stats in rows:
        for source, rate in sorted(stats.prompt_tokens_cached_by_source.items()):
            cached.add_sample("inference_prompt_tokens_cached_per_second", {**labels, "source": source}, rate)
    yield cached
    yield from _tiers(rows, family)
    yield from _target_gauges(view, family)


def _tiers(rows: list[tuple[dict[str, str], WindowStats]], family: Callable[[str], F]) -> Iterator[F]:
    for metric, kind in _TIER_SUMMARIES.items():
        fam = family(metric)
        for labels, stats in rows:
            for key, quantiles in sorted(stats.quantiles.items()):
                histogram, slash, tier = key.partition("/")
                if slash and histogram == kind:
                    for q, value in quantiles.items():
                        fam.add_sample(metric, {**labels, "tier": tier, "quantile": f"{q:g}"}, value)
        yield fam
    for metric, key in _TIER_GAUGES.items():
        fam = family(metric)
        for labels, stats in rows:
            for tier, numbers in sorted(stats.kv_tiers.items()):
                if key in numbers:
                    fam.add_sample(metric, {**labels, "tier": tier}, numbers[key])
        yield fam


def tier_usage(gauges: dict[str, dict[str, float]]) -> list[tuple[str, str, float]]:
    """(model, tier, used / capacity) of the tiers whose capacity the page gives (SGLang's host pool)."""
    out = []
    for key, capacities in sorted(gauges.items()):
        kind, _, tier = key.partition("/")
        if kind != "kv_tier_capacity":
            continue
        used = gauges.get(f"kv_tier_used/{tier}", {})
        out += [(model, tier, used[model] / total) for model, total in sorted(capacities.items())
                if total > 0 and model in used]
    return out


def _position(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def _slo(rows: list[tuple[dict[str, str], WindowStats]], family: Callable[[str], F]) -> F:
    fam = family("inference_slo_attainment_ratio")
    for labels, stats in rows:
        for objective, share in sorted(stats.slo_attainment.items()):
            fam.add_sample("inference_slo_attainment_ratio", {**labels, "objective": objective}, share)
    return fam


def render_objectives(view: ServiceView) -> Metric:
    fam = family("inference_slo_objective_seconds")
    for objective, seconds in (("ttft", view.objectives.ttft_seconds), ("tpot", view.objectives.tpot_seconds)):
        fam.add_sample("inference_slo_objective_seconds", {"objective": objective}, seconds)
    return fam


def _target_gauges(view: ServiceView, family: Callable[[str], F]) -> Iterator[F]:
    for metric, key in _TARGET_GAUGES.items():
        fam = family(metric)
        for name, target in view.targets.items():
            for model, value in sorted(target.gauges.get(key, {}).items()):
                fam.add_sample(metric, {"target": name, "model": model}, value)
        yield fam
    for metric, (key, label) in _LABELLED_GAUGES.items():
        fam = family(metric)
        for name, target in view.targets.items():
            for model, values in sorted(target.labelled.get(key, {}).items()):
                for kept, value in sorted(values.items()):
                    fam.add_sample(metric, {"target": name, "model": model, label: kept}, value)
        yield fam
    usage = family("inference_kv_tier_usage_ratio")
    for name, target in view.targets.items():
        for model, tier, ratio in tier_usage(target.gauges):
            usage.add_sample(usage.name, {"target": name, "model": model, "tier": tier}, ratio)
    yield usage
    imbalance, sleeping = family("inference_rank_imbalance_ratio"), family("inference_engines_sleeping")
    for name, target in view.targets.items():
        for model, ratio in sorted(rank_imbalance(target.labelled).items()):
            imbalance.add_sample(imbalance.name, {"target": name, "model": model}, ratio)
        for model, states in sorted(target.labelled.get("sleep_state", {}).items()):
            asleep = sum(v for state, v in states.items() if state != "awake")
            sleeping.add_sample(sleeping.name, {"target": name, "model": model}, asleep)
    yield imbalance
    yield sleeping
    lora, lora_max = family("inference_lora_adapters"), family("inference_lora_adapters_max")
    for name, target in view.targets.items():
        if target.lora is None:
            continue
        lora.add_sample(lora.name, {"target": name, "state": "running"}, float(len(target.lora.running)))
        lora.add_sample(lora.name, {"target": name, "state": "waiting"}, float(len(target.lora.waiting)))
        if target.lora.max_lora is not None:
            lora_max.add_sample(lora_max.name, {"target": name}, float(target.lora.max_lora))
    yield lora
    yield lora_max


_STALE_COUNT = "inference_monitor_stale_targets"  # the one family about all targets at once


@dataclass
class _Lines:
    """One target's sample lines, family by family, and what they were rendered from."""

    key: tuple[object, ...]
    sources: tuple[object, ...]
    texts: dict[str, str]


class ServiceText:
    """`render_service`'s page, byte for byte, with each target's lines kept until its view changes.

    Under `infermon serve` the page is rendered every publish tick (5 s) while a target is scraped
    every 15 s: two renders in three found it as it was. Its lines are reused then (its view holds
    the same gauges and stats objects, and the same state); only the fleet-wide rows and the stale
    count are rendered each time. A target's lines are those `render_service` writes for a view of
    that target alone, so the page equals the whole render (tests/service/test_service_text.py).
    """

    def __init__(self) -> None:
        self._targets: dict[str, _Lines] = {}
        self._headers: dict[str, str] = {}  # family name -> HELP/TYPE, in render_service's order

    def render(self, view: ServiceView, writer: TextWriter, out: list[str]) -> None:
        """Append the service layer's families to `out` (in the worker thread, one render at a time)."""
        if not self._headers:  # every family, in render_service's order (it yields empty ones too)
            self._headers = {fam.name: header(fam) for fam in render_service(_alone(view, {}, {}))}
        kept: dict[str, _Lines] = {}
        for name, target in view.targets.items():
            key = text_key(target)
            sources = (target.gauges, target.labelled, target.lora, target.stats)
            lines = self._targets.get(name)
            if lines is None or lines.key != key or not all(
                    a is b or (not a and not b) for a, b in zip(lines.sources, sources, strict=True)):
                rendered = target.texts  # a parse worker's, for the view it had then
                if rendered is None or rendered[0] != key:
                    rendered = key, self._texts(_alone(view, {name: target}, {}), writer)
                lines = _Lines(key, sources, rendered[1])
            kept[name] = lines
        self._targets = kept
        fleet = self._texts(_alone(view, {}, view.fleet), writer)
        stale = family(_STALE_COUNT)
        stale.add_sample(_STALE_COUNT, {"collector": "service"},
                         float(sum(1 for target in view.targets.values() if target.stale)))
        fleet[_STALE_COUNT] = _text(stale, writer)
        every = [lines.texts for lines in kept.values()]
        for name, head in self._headers.items():
            # Each target's text a part of its own (never one join of a large family: `encode_chunks`
            # cuts the page between parts, the interpreter free between its pieces).
            body = [texts[name] for texts in every if name in texts]
            if name in fleet:
                body.append(fleet[name])
            if any(body):
                out.append(head)
                out.extend(body)

    def _texts(self, view: ServiceView, writer: TextWriter) -> dict[str, str]:
        """Family name -> its sample lines, for the families with samples (the stale count left out)."""
        texts: dict[str, str] = {}
        for fam in _render(view, lambda name: _TextFamily(name, writer)):
            if fam.samples and fam.name != _STALE_COUNT:
                texts[fam.name] = "".join(fam.samples)
                # A family render_service yields only for some views would otherwise be left out
                # (it yields every one today): it goes last, its lines kept.
                self._headers.setdefault(fam.name, _named(fam.name)[1])
        return texts


def text_key(target: TargetView) -> tuple[object, ...]:
    """What a target's lines depend on besides its numbers."""
    return (target.up, target.stale, target.waiting, target.recognized, target.engine, target.generation,
            target.version)


def target_texts(view: ServiceView, target: TargetView, writer: TextWriter) -> TargetLines:
    """One target's lines, family by family, as `ServiceText` keeps them (a parse worker's render)."""
    return text_key(target), ServiceText()._texts(_alone(view, {target.name: target}, {}), writer)


class _TextFamily:
    """A family as the render fills it, each sample written to its line at once: no `Sample`
    tuple per sample and no second walk to write them (a 10-model target has ~700 samples)."""

    __slots__ = ("_writer", "name", "samples")

    def __init__(self, name: str, writer: TextWriter) -> None:
        self.name = _named(name)[0]
        self.samples: list[str] = []
        self._writer = writer

    def add_sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.samples.append(self._writer.line(name, labels, value))


@functools.cache
def _named(metric: str) -> tuple[str, str]:
    """A catalogued metric's family name (a counter's without `_total`) and its HELP/TYPE lines."""
    fam = family(metric)
    return fam.name, header(fam)


def _alone(view: ServiceView, targets: dict[str, TargetView], fleet: dict[tuple[str, str], WindowStats]) -> ServiceView:
    return ServiceView(view.ts, view.windows, view.objectives, targets=targets, fleet=fleet)


def _text(fam: Metric, writer: TextWriter) -> str:
    out: list[str] = []
    writer.samples(fam, out)
    return "".join(out)
