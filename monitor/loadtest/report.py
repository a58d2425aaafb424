"""A result -> one self-contained HTML page: the conditions first, then the plots, inline SVG.

    latency percentiles vs load     TTFT P50/P95/P99 and TPOT P50 per level, ± stdev bars
    throughput vs load              output and total tokens/s per level
    trade-off                       output tokens/s (x) against TTFT P99 (y), one point a level
    TTFT distribution               the measured samples' cumulative distribution, one line a level
    Pareto                          output tokens/s per user (x) against per GPU (y), one point a level
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from monitor.loadtest.capacity import pareto
from monitor.loadtest.hypotheses import level_lines
from monitor.loadtest.result import figure
from monitor.loadtest.summary import LATENCY_COLUMNS, THROUGHPUT_COLUMNS, cell, header_lines
from monitor.loadtest.summary import warnings as all_warnings
from monitor.loadtest.verdict import client_of

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1150px;color:#1d2430;padding:0 1em}
h1{font-size:22px}h2{font-size:17px;margin-top:1.8em;border-bottom:1px solid #ccd}
table{border-collapse:collapse;width:100%;margin:.5em 0}td,th{border-bottom:1px solid #e3e6ee;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#f3f5f9}.n{text-align:right;font-variant-numeric:tabular-nums}
.warn{background:#fde7e4;color:#8a1c12;border:1px solid #f2b8b0;padding:6px 10px;border-radius:4px;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:18px}.chart h3{font-size:14px;margin:.4em 0}.muted{color:#667}
code{font-size:12px}
"""
_COLORS = ("#2458b3", "#d9731a", "#2f9e44", "#b3261e", "#7048a8", "#0f8a8a", "#8a6d1a")
_W, _H, _PAD_L, _PAD_B, _PAD_T, _PAD_R = 520, 300, 62, 42, 14, 40

Point = tuple[float, float, float]  # x, y, ± error on y


def render_report(result: dict[str, Any]) -> str:
    title = f"Benchmark {result['model']}"
    body = [f"<h1>{escape(title)}</h1>"]
    if result.get("synthetic"):
        body.append('<p class="warn">Synthetic data: the prompts were generated, not taken from a data set. '
                    "Latency and throughput on real prompts may differ.</p>")
    body.append("".join(f'<p class="muted">{escape(line)}</p>' for line in header_lines(result)
                        if not line.startswith("SYNTHETIC")))
    body.append("<h2>Conditions</h2>" + _conditions(result))
    warnings = all_warnings(result)
    body.append("<h2>Results (mean ± stdev over repeats)</h2>" + _results(result)
                + "".join(f'<p class="warn">{escape(line)}</p>' for line in warnings))
    serving = level_lines(result)  # KV tier, P/D, MoE against their budgets (monitor.loadtest.hypotheses)
    if serving:
        body.append("<h2>KV tiers, P/D, MoE (the engine's own numbers)</h2>"
                    + "".join(f"<p>{escape(line)}</p>" for line in serving))
    if result.get("capacity"):
        body.append(f'<p><b>{escape(result["capacity"]["words"])}</b></p>')
    body.append('<h2>Plots</h2><div class="charts">' + "".join(_charts(result)) + "</div>")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>")


def _conditions(result: dict[str, Any]) -> str:
    c = result["conditions"]
    work, gpu, server, user = c["workload"], c.get("gpu", {}), c.get("server", {}), c.get("user", {})
    lengths = work["lengths"]
    rows = [
        ("input lengths asked", _lengths(lengths["input_tokens"]) + " (estimated, 4 characters a token)"),
        ("output lengths asked", _lengths(lengths["output_tokens"]) + " (max_tokens)"),
        ("input lengths by the engine's tokenizer", _exact_lengths(work.get("lengths_exact"))),
        ("input lengths served", _served_lengths(work.get("served"), "input")),
        ("output lengths served", _served_lengths(work.get("served"), "output")),
        ("lengths served per level", _served(result)),
        ("concurrency / rate", ", ".join(lv["label"] for lv in work["levels"])),
        ("GPU", f"{gpu.get('count') or 0} x {gpu.get('model') or 'not observed'}, "
                f"{_gib(gpu.get('memory_total_bytes'))} each (source: {gpu.get('source') or 'none'})"),
        ("driver / CUDA", f"{gpu.get('driver') or 'not observed'} / {gpu.get('cuda') or 'not observed'}"),
        ("serving framework", " ".join(str(v) for v in (server.get("engine"), server.get("generation"),
                                                          server.get("version")) if v) or "not observed"),
        ("framework configuration", "<br>".join(
            f"{escape(name)}: <code>{escape(', '.join(f'{k}={v}' for k, v in labels.items()))}</code>"
            for name, labels in server.get("config", {}).items()) or "not on the engine page"),
        ("precision / optimizations",
         f"{user.get('precision') or 'not stated'} / {user.get('note') or 'not stated'}"),
        ("data set", f"{work['dataset']['source']} {work['dataset'].get('path') or ''}, "
                     + ("generated, a new prompt for every request (none sent twice)"
                        if work["dataset"].get("unique_per_request") else
                        f"{work['dataset']['prompts']} prompts, sha256 {work['dataset'].get('sha256') or '-'}")),
        ("procedure", f"scenario {work['scenario']['name']}, {result['warmup']['requests']} warm-up requests "
                      f"excluded, {work['repeats']} repeat(s) x {work['duration_s']:g} s per level, "
                      f"seed {work['seed']}"),
        ("goodput objective", f"TTFT < {work['goodput']['ttft_s'] * 1000:g} ms and "
                              f"TPOT < {work['goodput']['tpot_s'] * 1000:g} ms"),
        ("price", _price(c.get("price"))),
        ("tool", f"{c['tool']['name']} {c['tool']['version']}, Python {c['tool']['python']}, "
                 f"HTTP client {client_of(result)}" + (f" ({c['tool']['client_note']})"
                                                       if c["tool"].get("client_note") else "")),
    ]
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{v if k == 'framework configuration' else escape(v)}</td></tr>"
                    for k, v in rows)
    return f"<table>{cells}</table>"


def _lengths(stats: dict[str, Any]) -> str:
    parts = [f"{k} {stats[k]:.0f}" for k in ("mean", "p50", "p95", "p99") if stats.get(k) is not None]
    return ", ".join(parts) or "-"


def _served_lengths(served: dict[str, Any] | None, which: str) -> str:
    """The run's per-request distribution as the server counted it, and where the numbers came from."""
    if not served or served.get(f"{which}_from") is None:
        return "no usage reported"
    return f"{_lengths(served[f'{which}_tokens'])} ({served[f'{which}_from']}, {served['requests']} requests)"


def _exact_lengths(exact: dict[str, Any] | None) -> str:
    if not exact:
        return "not counted (an engine without a tokenizer endpoint, or --no-tokenize)"
    if exact.get("error"):
        return f"not counted: {exact['error']}"
    return f"{_lengths(exact['input_tokens'])} ({exact['from']}, {exact['requests']} requests)"


def _served(result: dict[str, Any]) -> str:
    """The server's own counts (`usage`), at each level: mean input / output tokens per request."""
    parts = []
    for level in result["levels"]:
        inputs = figure(level, "served_input_tokens", "mean")
        outputs = figure(level, "served_output_tokens", "mean")
        if inputs and inputs["mean"] is not None and outputs and outputs["mean"] is not None:
            parts.append(f"{level['level']['label']}: {inputs['mean']:.0f} in / {outputs['mean']:.0f} out")
    return ("; ".join(parts) + " (mean tokens a request, the server's usage)") if parts else "no usage reported"


def _gib(value: float | None) -> str:
    return f"{value / 2**30:.0f} GiB" if value else "memory not observed"


def _price(price: dict[str, Any] | None) -> str:
    if not price:
        return "no price for this GPU (cost.gpu_prices or --gpu-price)"
    return f"{price['usd_per_hour']:.2f} USD/hour for the run's GPUs ({price['source']}: {price['key']})"


def _results(result: dict[str, Any]) -> str:
    out = []
    for columns in (LATENCY_COLUMNS, THROUGHPUT_COLUMNS):
        head = "".join(f'<th class="n">{escape(name)}</th>' for name, _, _ in columns)
        rows = "".join(
            f"<tr><td>{escape(level['level']['label'])}</td>"
            + "".join(f'<td class="n">{escape(cell(level, path, unit))}</td>'
                      for _, path, unit in columns) + "</tr>"
            for level in result["levels"])
        out.append(f"<table><tr><th>level</th>{head}</tr>{rows}</table>")
    return "".join(out)


def _mean(level: dict[str, Any], *path: str) -> tuple[float, float] | None:
    value = figure(level, *path)
    if value is None or value["mean"] is None:
        return None
    return float(value["mean"]), float(value.get("stdev") or 0.0)


def _series(levels: Sequence[dict[str, Any]], path: tuple[str, ...], scale: float = 1.0) -> list[Point]:
    points = []
    for level in levels:
        value = _mean(level, *path)
        if value is not None:
            points.append((float(level["level"]["value"]), value[0] * scale, value[1] * scale))
    return points


def _charts(result: dict[str, Any]) -> list[str]:
    levels = result["levels"]
    kind = levels[0]["level"]["kind"]
    values = [float(level["level"]["value"]) for level in levels]
    x_name = "concurrency" if kind == "concurrency" else "request rate (req/s)"
    latency = {name: _series(levels, ("ttft_s", p), 1000) for name, p in
               (("TTFT P50", "p50"), ("TTFT P95", "p95"), ("TTFT P99", "p99"))}
    latency["TPOT P50"] = _series(levels, ("tpot_s", "p50"), 1000)
    throughput = {"output tok/s": _series(levels, ("output_tokens_per_s",)),
                  "total tok/s": _series(levels, ("total_tokens_per_s",))}
    trade: list[Point] = []
    labels = []
    for level in levels:
        x, y = _mean(level, "output_tokens_per_s"), _mean(level, "ttft_s", "p99")
        if x is not None and y is not None:
            trade.append((x[0], y[0] * 1000, y[1] * 1000))
            labels.append(level["level"]["label"])
    cdf = {level["level"]["label"]: _cdf(level.get("ttft_samples_s") or []) for level in levels}
    front = sorted(pareto(levels, result["conditions"].get("gpu", {}).get("count") or 1), key=lambda p: p["per_user"])
    return [
        _chart(f"Latency vs {x_name}", latency, x_name, "ms", x_ticks=values),
        _chart(f"Throughput vs {x_name}", throughput, x_name, "tokens/s", x_ticks=values),
        _chart("Throughput / latency trade-off", {"TTFT P99": trade}, "output tokens/s", "TTFT P99 (ms)",
               point_labels=labels),
        _chart("TTFT distribution (all repeats)", cdf, "TTFT (ms)", "share of requests", markers=False),
        _chart("Pareto: per user vs per GPU", {"levels": [(p["per_user"], p["per_gpu"], 0.0) for p in front]},
               "output tokens/s per user", "output tokens/s per GPU", point_labels=[p["label"] for p in front]),
    ]


def _cdf(samples: Sequence[float]) -> list[Point]:
    ordered = sorted(samples)
    n = len(ordered)
    step = max(1, n // 200)  # at most ~200 points a line
    points = [(v * 1000, (i + 1) / n, 0.0) for i, v in enumerate(ordered) if i % step == 0 or i == n - 1]
    return points


def _chart(title: str, series: dict[str, list[Point]], x_label: str, y_label: str, *,
           point_labels: Sequence[str] = (), markers: bool = True, x_ticks: Sequence[float] = ()) -> str:
    drawn = {name: pts for name, pts in series.items() if pts}
    if not drawn:
        return f'<div class="chart"><h3>{escape(title)}</h3><p class="muted">nothing measured</p></div>'
    xs = [p[0] for pts in drawn.values() for p in pts]
    ys = [p[1] + p[2] for pts in drawn.values() for p in pts] + [0.0]
    x0, x1 = min(xs), max(xs)
    x0, x1 = (x0 - 1, x1 + 1) if x0 == x1 else (x0, x1)
    y1 = max(ys) * 1.08 or 1.0

    def sx(x: float) -> float:
        return _PAD_L + (x - x0) / (x1 - x0) * (_W - _PAD_L - _PAD_R)

    def sy(y: float) -> float:
        return _H - _PAD_B - y / y1 * (_H - _PAD_B - _PAD_T)

    ticks = list(x_ticks) or [x0 + (x1 - x0) * i / 4 for i in range(5)]
    parts = [_axes(ticks, y1, sx, sy, x_label, y_label)]
    for color, pts in zip(_COLORS, drawn.values(), strict=False):
        pts = sorted(pts)
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in pts)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        for i, (x, y, err) in enumerate(pts if markers else []):
            if err:
                parts.append(f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{sy(y - err):.1f}" '
                             f'y2="{sy(y + err):.1f}" stroke="{color}"/>')
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}"/>')
            if point_labels and i < len(point_labels):
                parts.append(f'<text x="{sx(x) + 6:.1f}" y="{sy(y) - 6:.1f}" font-size="11">'
                             f"{escape(point_labels[i])}</text>")
    legend = "".join(f'<tspan fill="{c}" dx="12">■ {escape(n)}</tspan>' for c, n in zip(_COLORS, drawn, strict=False))
    parts.append(f'<text x="{_PAD_L - 12}" y="{_H + 10}" font-size="11">{legend}</text>')
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H + 14}" font-family="sans-serif">'
    return f'<div class="chart"><h3>{escape(title)}</h3>{svg}{"".join(parts)}</svg></div>'


def _axes(x_ticks: Sequence[float], y1: float, sx: Any, sy: Any, x_label: str, y_label: str) -> str:
    out = [f'<rect x="{_PAD_L}" y="{_PAD_T}" width="{_W - _PAD_L - _PAD_R}" height="{_H - _PAD_B - _PAD_T}" '
           'fill="#fbfcfe" stroke="#ccd"/>']
    for i in range(5):
        y = y1 * i / 4
        out.append(f'<line x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#e6e9f0"/>'
                   f'<text x="{_PAD_L - 6}" y="{sy(y) + 4:.1f}" font-size="11" text-anchor="end">{_tick(y)}</text>')
    for x in x_ticks:
        out.append(f'<text x="{sx(x):.1f}" y="{_H - _PAD_B + 15}" font-size="11" '
                   f'text-anchor="middle">{_tick(x)}</text>')
    out.append(f'<text x="{(_PAD_L + _W) / 2}" y="{_H - _PAD_B + 30}" font-size="12" text-anchor="middle">'
               f"{escape(x_label)}</text>")
    out.append(f'<text x="14" y="{_H / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {_H / 2})">{escape(y_label)}</text>')
    return "".join(out)


def _tick(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"

