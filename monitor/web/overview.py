"""Everything the overview shows, as one JSON-able `Overview` (shapes.py) built from the layers' views.

The page (`/`), `/api/v1/status` (under "overview") and `infermon status` all read this one
shape, so the browser, the terminal and a script see the same numbers.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Literal, TypedDict, cast

from monitor.aio import Turns
from monitor.alerting.runbooks import with_runbook_link
from monitor.canary.collector import CanaryStatus
from monitor.cost.collector import FLEET, CostView
from monitor.health import HealthBook
from monitor.infra.ledger import gpu_health
from monitor.infra.reading import CLOCK_EVENT_REASONS, GpuState, InfraView
from monitor.quality.layer import QualityView
from monitor.service.derive import WindowStats, rank_imbalance
from monitor.service.view import ServiceView, TargetView, target_state
from monitor.web.history import HEADLINE, History, mean
from monitor.web.shapes import (
    AlertRow,
    AlertsSection,
    CanaryRow,
    Chart,
    CostSection,
    EngineFacts,
    FleetRow,
    GpuRow,
    InfraSection,
    LayerState,
    ModelRow,
    Overview,
    QualityRow,
    QualitySection,
    ServiceSection,
    TargetHead,
    TargetRow,
    WindowNumbers,
)
from monitor.web.source import OverviewSource

LAYERS: tuple[Literal["service", "infra", "quality", "cost"], ...] = ("service", "infra", "quality", "cost")
# Which collectors' health speaks for which layer (canary probes are the service as users see it).
_COLLECTORS = {"service": ("service", "file_sd", "canary"), "infra": ("infra",),
               "quality": ("quality_run", "quality"), "cost": ("cost",)}
_ALERT_LAYER = {"canary": "service", "monitor": "service"}
EVENTS = 15
TRANSITIONS = 10
SHOWN_ALERTS = 100  # active alerts listed, firing first (the totals count them all; /api/v1/alerts lists all)


class _Sections(TypedDict):
    service: ServiceSection
    infra: InfraSection
    quality: QualitySection
    cost: CostSection


def overview(source: OverviewSource, service: ServiceSection | None = None) -> Overview:
    """`service`: the service section, made already (`overview_in_turns`)."""
    now = source.wall()
    counts = source.alerting.counts() if source.alerting else {}
    alerts = _alerts(source, counts)
    sections = _Sections(
        service=service if service is not None else service_rows(source.service.view, _configured(source)),
        infra=gpu_rows(source.infra.view),
        quality=quality_rows(source.quality.view),
        cost=cost_summary(source.cost.view),
    )
    firing = _firing_by_layer(counts)
    layers: dict[str, LayerState] = {name: layer_state(name, sections[name], source.health, firing.get(name, ()))
                                     for name in LAYERS}
    return {
        "ts": now,
        "window": sections["service"]["window"],
        "ok": all(layer["state"] in ("ok", "not configured") for layer in layers.values()) and not alerts["firing"],
        "layers": layers,
        **sections,
        "canary": canary_rows(source.canary.status()),
        "alerts": alerts,
        "events": source.events[:EVENTS],  # kept by the store thread: no query on the loop
        "trends": source.alerting.trends if source.alerting else [],  # week over week (the history)
        "charts": charts(source.history, now),
    }


async def overview_in_turns(source: OverviewSource) -> Overview:
    """`overview` on the loop, its other work let in between the service section's targets."""
    return overview(source, await service_rows_in_turns(source.service.view, _configured(source)))


def _configured(source: OverviewSource) -> bool:
    return bool(source.settings.service.targets or source.settings.service.file_sd)


def headline(service: ServiceView, infra: InfraView, cost: CostView,
             canary_ttft: Iterable[float | None] = ()) -> dict[str, float | None]:
    """The values the history ring samples: fleet requests/s and generated tokens/s, worst P99
    TTFT, mean GPU use, $/h; `canary_ttft`: each probe's last TTFT (the worst is sampled), the
    latency of an engine whose page has no TTFT (llama.cpp)."""
    window = _window(service)
    fleet = [stats for (_, w), stats in service.fleet.items() if w == window]
    rates = [s.requests_per_second for s in fleet if s.requests_per_second is not None]
    tokens = [s.generation_tokens_per_second for s in fleet if s.generation_tokens_per_second is not None]
    p99 = [s.quantiles.get("ttft", {}).get(0.99) for s in fleet]
    util = [g.reading.utilization_ratio for g in infra.gpus if g.up and g.reading is not None]
    return {
        "requests_per_second": sum(rates) if rates else None,
        "generation_tokens_per_second": sum(tokens) if tokens else None,
        "ttft_p99_seconds": max((v for v in p99 if v is not None), default=None),
        "canary_ttft_seconds": max((v for v in canary_ttft if v is not None), default=None),
        "gpu_utilization_ratio": mean(v for v in util if v is not None),
        "usd_per_hour": cost.numbers.usd_per_hour if cost.present else None,
    }


def _window(service: ServiceView) -> str:
    """The shortest window: the page is about now."""
    return min(service.windows, key=lambda w: w.seconds).label if service.windows else ""


def service_rows(view: ServiceView, configured: bool) -> ServiceSection:
    window = _window(view)
    rows = [row for name, target in sorted(view.targets.items()) for row in _target_rows(view, window, name, target)]
    return _service_section(view, configured, window, rows)


async def service_rows_in_turns(view: ServiceView, configured: bool) -> ServiceSection:
    """`service_rows` on the loop, its other work let in between targets (a row per target and model:
    a large fleet's are many). `view` is the published one, which nothing changes: the rows are of one view."""
    window, turn, rows = _window(view), Turns(), list[TargetRow | ModelRow]()
    for name, target in sorted(view.targets.items()):
        rows += _target_rows(view, window, name, target)
        await turn()
    return _service_section(view, configured, window, rows)


def _target_rows(view: ServiceView, window: str, name: str, target: TargetView) -> list[TargetRow | ModelRow]:
    models = sorted({model for model, w in target.stats if w == window} | set(_gauge_models(target.gauges)))
    base: TargetHead = {"target": name, "up": None if target.waiting else target.up,
                            "state": _target_state(target),
                            "detail": target.detail, "engine": target.engine, "generation": target.generation,
                            "note": target.note}
    if not models or not target.up:
        return [{**base, "model": None}]
    rows: list[TargetRow | ModelRow] = []
    imbalance = rank_imbalance(target.labelled)  # every model's at once (per model: 10,000 rows took 0.5 s)
    for model in models:
        stats = target.stats.get((model, window), WindowStats())
        rows.append({**base, "model": model, **_stats(stats), "baseline": view.baseline(stats),
                     "running": target.gauges.get("running", {}).get(model),
                     "waiting": target.gauges.get("waiting", {}).get(model),
                     "kv_cache_ratio": target.gauges.get("kv_cache", {}).get(model),
                     **engine_facts(target, model, stats, imbalance.get(model))})
    return rows


def _service_section(view: ServiceView, configured: bool, window: str,
                     rows: list[TargetRow | ModelRow]) -> ServiceSection:
    fleet: list[FleetRow] = [{"model": model, **_stats(stats)}
                             for (model, w), stats in sorted(view.fleet.items()) if w == window]
    return {"configured": configured, "window": window, "rows": rows, "fleet": fleet,
            "objectives": {"ttft_seconds": view.objectives.ttft_seconds,
                           "tpot_seconds": view.objectives.tpot_seconds}}


def engine_facts(target: TargetView, model: str, stats: WindowStats | None = None,
                 imbalance: float | None = None) -> EngineFacts:
    """What the engine's page says beyond the headline numbers (ranks, why requests wait, sleep,
    LoRA, the prefix cache and speculative decoding against their baselines), structured for the
    API and as one short line for the page and `infermon status` (`facts`). `imbalance`: the
    model's `rank_imbalance`."""
    labelled = target.labelled
    ranks = sorted(set(labelled.get("rank_running", {}).get(model, {}))
                   | set(labelled.get("rank_waiting", {}).get(model, {})))
    reasons = labelled.get("waiting_by_reason", {}).get(model)
    states = labelled.get("sleep_state", {}).get(model)
    asleep = sum(v for k, v in states.items() if k != "awake") if states else None
    lora = target.lora
    facts: list[str] = []
    if len(ranks) > 1:
        facts.append(f"{len(ranks)} ranks" + (f", busiest {imbalance:.2f}x the mean" if imbalance else ""))
    if reasons and any(reasons.values()):
        facts.append("waiting: " + ", ".join(f"{v:g} {k}" for k, v in sorted(reasons.items()) if v))
    if asleep:
        facts.append(f"{asleep:g} engine(s) asleep")
    if lora is not None and (lora.running or lora.waiting):
        facts.append(f"LoRA {len(lora.running)} running, {len(lora.waiting)} waiting"
                     + (f" of {lora.max_lora}" if lora.max_lora is not None else ""))
    stats = stats or WindowStats()
    for label, now, baseline in (
            ("prefix cache", stats.prefix_cache_hit_ratio, stats.prefix_cache_hit_ratio_baseline),
            ("drafts accepted", stats.spec_decode_acceptance_ratio, stats.spec_decode_acceptance_ratio_baseline)):
        if now is not None:
            facts.append(f"{label} {now * 100:.0f} %" + (f" (baseline {baseline * 100:.0f} %)"
                                                         if baseline is not None else ""))
    return {"ranks": len(ranks) or None, "rank_imbalance_ratio": imbalance, "waiting_by_reason": reasons,
            "prefix_cache_hit_ratio": stats.prefix_cache_hit_ratio,
            "prefix_cache_hit_ratio_baseline": stats.prefix_cache_hit_ratio_baseline,
            "spec_decode_acceptance_ratio": stats.spec_decode_acceptance_ratio,
            "spec_decode_acceptance_ratio_baseline": stats.spec_decode_acceptance_ratio_baseline,
            "engines_sleeping": asleep,
            "lora": None if lora is None else {"running": list(lora.running), "waiting": list(lora.waiting),
                                               "max": lora.max_lora},
            "facts": " · ".join(facts)}


def _target_state(target: TargetView) -> str:
    return target_state(target.up or target.stale, target.stale, target.detail,
                        None if target.recognized else target.detail)


def _gauge_models(gauges: dict[str, dict[str, float]]) -> set[str]:
    return {model for per_model in gauges.values() for model in per_model}


def _stats(stats: WindowStats) -> WindowNumbers:
    ttft, tpot = stats.quantiles.get("ttft", {}), stats.quantiles.get("tpot", {})
    return {"requests_per_second": stats.requests_per_second, "error_ratio": stats.error_ratio,
            "generation_tokens_per_second": stats.generation_tokens_per_second,
            "ttft_p50_seconds": ttft.get(0.5), "ttft_p99_seconds": ttft.get(0.99),
            "tpot_p50_seconds": tpot.get(0.5), "tpot_p99_seconds": tpot.get(0.99),
            # every observation under the first bucket's bound: the quantiles read "< bound"
            "ttft_below_seconds": stats.below_first_bound.get("ttft"),
            "tpot_below_seconds": stats.below_first_bound.get("tpot")}


def gpu_rows(view: InfraView) -> InfraSection:
    return {"configured": bool(view.gpus), "rows": [_gpu(g) for g in view.gpus]}


def _gpu(gpu: GpuState) -> GpuRow:
    health = gpu_health(gpu)  # None: the source reports no health field
    row: GpuRow = {"node": gpu.node, "gpu": gpu.gpu, "source": gpu.source, "up": gpu.up, "error": gpu.error,
                           "model": gpu.identity.model if gpu.identity else None,
                           "health": health[0] if health else None, "health_reasons": list(health[1]) if health else []}
    r = gpu.reading
    if r is None:
        return row
    mask = r.clock_event_mask or 0
    return {**row, "utilization_ratio": r.utilization_ratio, "memory_used_bytes": r.memory_used_bytes,
            "memory_total_bytes": r.memory_total_bytes, "memory_used_ratio": r.memory_used_ratio,
            "temperature_celsius": r.temperature_celsius, "power_watts": r.power_watts,
            "power_limit_watts": r.power_limit_watts, "power_used_ratio": r.power_used_ratio,
            "clock_events": [reason for reason, bit in CLOCK_EVENT_REASONS.items() if mask & bit]}


def quality_rows(view: QualityView) -> QualitySection:
    rows: list[QualityRow] = []
    for model, result in sorted(view.latest.items()):
        s = result.summary
        histogram = s.score_histogram or {}
        rows.append({"model": model, "date": result.date, "finished": result.finished,
                     "samples": s.samples, "score_mean": s.score_mean,
                     "score_baseline_delta": s.score_baseline_delta,
                     "histogram": [int(histogram.get(str(score), 0)) for score in range(1, 6)],
                     "refusal_ratio": s.refusal_ratio, "hallucination_ratio": s.hallucination_ratio,
                     "psi": s.psi, "length_change_ratio": s.output_length_mean_change_ratio,
                     "judge_errors": s.judge_errors, "suspect_verdicts": s.suspect_verdicts,
                     "failed": s.failed, "report": f"/reports/quality/{result.date}",
                     "uncalibrated": s.uncalibrated, "judge_changed": s.judge_changed,
                     "judge_kappa": s.calibration_kappa, "known_answers": s.calibration_answered})
    return {"configured": bool(rows), "rows": rows, "judge_cost_usd_total": view.judge_cost_usd_total}


def canary_rows(status: CanaryStatus) -> list[CanaryRow]:
    """Each probe's last outcome: the service as a user sees it, next to the engine's own numbers."""
    keys = ("name", "model", "target", "up", "outcome", "detail", "last_probe", "ttft_seconds", "ttft_gap_seconds",
            "e2e_seconds", "consecutive_failures")
    return [cast(CanaryRow, {key: probe.get(key) for key in keys}) for probe in status.get("probes", [])]


def cost_summary(view: CostView) -> CostSection:
    n = view.numbers
    per_million = sorted((model, window, tokens, usd) for (model, window, tokens), usd in n.per_million.items())
    return {"configured": view.present, "usd_per_hour": n.usd_per_hour if view.present else None,
            "idle_usd_per_hour": n.idle_usd_per_hour, "idle_ratio": n.idle_ratio,
            "per_million": [{"model": m, "window": w, "tokens": t, "usd": usd} for m, w, t, usd in per_million],
            "fleet_per_million": [{"window": w, "tokens": t, "usd": usd}
                                  for (w, t), usd in sorted(n.fleet_per_million.items())],
            "unmapped_targets": view.unmapped,
            "day": view.day, "today_usd": view.today.get(FLEET) if view.present else None,
            "budget_usd": view.budget_usd, "budget_used_ratio": view.budget_used_ratio if view.present else None,
            "unpriced_gpus": len(n.unpriced)}


def _alerts(source: OverviewSource, counts: dict[tuple[str, str, str], int]) -> AlertsSection:
    """The first SHOWN_ALERTS active alerts (firing first, then by severity, then the oldest first:
    the evaluator's order) with their deliveries,
    and how many are firing and pending in all: a large fleet can have tens of thousands active,
    and building, sending and reading every one of them is the alerts API's job, not the page's."""
    active = source.alerting.active(limit=SHOWN_ALERTS) if source.alerting else []
    recent = source.delivery.latest  # kept by the store thread: no query on the loop
    delivered: dict[str, dict[str, str]] = {}
    for row in reversed(recent):  # oldest first: the newest transition of an alert wins
        delivered[_key(row["labels"])] = row["deliveries"]
    base = source.settings.alerting.runbook_base_url
    rows: list[AlertRow] = [{**a, "annotations": with_runbook_link(a["annotations"], base),
             "layer": _ALERT_LAYER.get(a["labels"].get("layer", ""), a["labels"].get("layer")),
             "name": a["labels"].get("alertname", ""),
             "probable_cause": a["annotations"].get("probable_cause"),
             # a pending alert has sent nothing: what an earlier firing of it got is not its delivery
             "deliveries": delivered.get(_key(a["labels"]), {}) if a["state"] == "firing" else {}} for a in active]
    return {"enabled": source.alerting is not None, "active": rows,
            "firing": sum(n for (_, _, state), n in counts.items() if state == "firing"),
            "pending": sum(n for (_, _, state), n in counts.items() if state == "pending"),
            "recent": recent[:TRANSITIONS]}


def _firing_by_layer(counts: dict[tuple[str, str, str], int]) -> dict[str | None, list[str]]:
    """The overview's layer -> the names of its firing alerts (canary and monitor alerts: the service's)."""
    found: dict[str | None, list[str]] = {}
    for layer, name, state in counts:
        if state == "firing":
            found.setdefault(_ALERT_LAYER.get(layer, layer or None), []).append(name)
    return found


def _key(labels: dict[str, str]) -> str:
    return "\x00".join(f"{k}={v}" for k, v in sorted(labels.items()))


def layer_state(name: str, section: Mapping[str, Any], health: HealthBook,
                firing: Collection[str]) -> LayerState:
    """ok / firing / failing / not configured, with the reason in a few words (`firing`: the
    names of the layer's firing alerts)."""
    failing = [e for e in health.entries.values()
               if e.collector in _COLLECTORS[name] and e.present and e.success is False]
    rows = section.get("rows", [])
    down = [r for r in rows if r.get("up") is False]
    unrecognized = [r for r in rows if r.get("state") == "unrecognized"]
    # A quality run the judge failed on: the layer is blind, whatever its alerts say.
    blind = [f"{r['model']} run {r['date']}: {r['failed']}" for r in rows if r.get("failed")]
    if blind:
        firing_too = [f"firing: {', '.join(sorted(set(firing)))}"] if firing else []
        return {"state": "failing", "detail": "; ".join(blind + firing_too)}
    if firing:
        return {"state": "firing", "detail": ", ".join(sorted(set(firing)))}
    if failing or down or unrecognized:
        what = [f"{e.collector}{'/' + e.target if e.target else ''}: {e.error or 'failed'}" for e in failing]
        what += [f"{_row_name(r)} down" for r in down]
        what += [f"{_row_name(r)} engine not recognised: {r.get('detail')}" for r in unrecognized]
        return {"state": "failing", "detail": "; ".join(dict.fromkeys(what))}
    if not section.get("configured"):
        return {"state": "not configured", "detail": ""}
    waiting = [f"{_row_name(r)} waiting for the first scrape" for r in rows if r.get("state") == "waiting"]
    return {"state": "ok", "detail": "; ".join(dict.fromkeys(waiting))}


def _row_name(row: Mapping[str, object]) -> str:
    return str(row["target"]) if "target" in row else f"GPU {row.get('node')}/{row.get('gpu')}"


def charts(history: History, now: float) -> list[Chart]:
    """The four headline charts; a series with no points gives its place to its substitute when
    that has some (`substitute_for`: the title it stands in for). A chart without points stays in
    the list, empty: the page collapses it into one line."""
    shown: list[Chart] = []
    for series in HEADLINE:
        chosen, points = series, history.points(series.key, now)
        if not points and series.substitute is not None:
            stand_in = history.points(series.substitute.key, now)
            if stand_in:
                chosen, points = series.substitute, stand_in
        shown.append({"key": chosen.key, "title": chosen.title, "unit": chosen.unit, "points": points,
                      "substitute_for": series.title if chosen is not series else None})
    return shown
