"""GET /api/v1/cost: the numbers, with the prices and inventory they came from."""

from __future__ import annotations

from monitor.cost.collector import FLEET, IDLE, CostCollector


def cost_report(collector: CostCollector) -> dict[str, object]:
    view, prices, settings = collector.view, collector.prices, collector.settings
    numbers = view.numbers
    gpus = [
        {"node": c.gpu.node, "gpu": c.gpu.gpu, "model": c.gpu.model, "source": c.gpu.source, "up": c.gpu.up,
         "utilization_ratio": c.gpu.utilization, "price_known": c.quote is not None,
         "price": c.quote.as_dict() if c.quote else None, "usd_per_hour": c.usd_per_hour,
         "idle_usd_per_hour": c.idle_usd_per_hour, "targets": list(c.targets)}
        for c in numbers.gpus
    ]
    spend = {"usd_per_hour": numbers.usd_per_hour, "idle_usd_per_hour": numbers.idle_usd_per_hour,
             "today_usd": view.today.get(FLEET, 0.0), "total_usd": view.totals.get(FLEET)}
    return {
        "ts": view.ts,
        "present": view.present,
        "currency": settings.currency,
        "cny_per_usd": settings.cny_per_usd,
        "timezone": settings.timezone,
        "day": view.day,
        "spend": spend,
        # The same amounts in the reporting currency (cost.currency).
        "reporting": {k: prices.to_reporting(v) if v is not None else None for k, v in spend.items()},
        "idle_ratio": numbers.idle_ratio,
        "today_idle_usd": view.today.get(IDLE, 0.0),
        "budget": {"daily_usd": view.budget_usd, "used_ratio": view.budget_used_ratio},
        "by_target": numbers.by_target,
        "by_model": numbers.by_model,
        "per_million_tokens": [
            {"model": m, "window": w, "tokens": t, "usd": usd} for (m, w, t), usd in sorted(numbers.per_million.items())
        ],
        "fleet_per_million_tokens": [
            {"window": w, "tokens": t, "usd": usd} for (w, t), usd in sorted(numbers.fleet_per_million.items())
        ],
        "throughput": [
            {"model": m, "window": w, "generated_tokens_per_second": g, "all_tokens_per_second": a}
            for (m, w), (g, a) in sorted(numbers.throughput.items())
        ],
        "per_token_baseline_ratio": [
            {"model": m, "window": w, "ratio": r} for (m, w), r in sorted(numbers.baseline_ratio.items())
        ],
        "expensive_requests": [
            {"model": m, "window": w, "tokens": t, "ratio": e.ratio, "threshold_tokens": e.threshold_tokens,
             "baseline_p99_tokens": e.baseline_p99_tokens, "factor": settings.expensive_factor}
            for (m, w, t), e in sorted(numbers.expensive.items())
        ],
        "totals_usd": view.totals,
        "inventory": gpus,
        "unpriced": [{"node": c.gpu.node, "gpu": c.gpu.gpu, "model": c.gpu.model} for c in numbers.unpriced],
        "prices": prices.table(),
        "topology": view.topology.as_dict(),
        "unmapped_targets": view.unmapped,
    }
