"""`infermon status`: the overview of a running monitor in the terminal (rich tables).

Reads `/api/v1/status` (its "overview" key: the same numbers as the page at `/`). Below
WIDE columns (an 80-column terminal) each target, GPU and alert is a few lines of facts instead
of a table row that would be cut to `tar… mod…`. Exit codes
for cron jobs and readiness scripts: 0 every layer fine, 1 something down or firing, 2 the
monitor could not be asked.
"""

from __future__ import annotations

from typing import Literal

import httpx
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from monitor.history.summary import TrendRow
from monitor.web.page import above, change, crossing, gib, growth, ms, num, pct, quantile_ms, slo, usd
from monitor.web.shapes import AlertsSection, CanaryRow, GpuRow, ModelRow, Overview, PerMillion, TargetRow

_STYLE = {"ok": "green", "firing": "bold red", "failing": "yellow", "not configured": "dim",
          "good": "green", "warn": "yellow", "bad": "bold red", "": ""}


WIDE = 120  # columns from which the tables fit


class StatusError(Exception):
    pass


def fetch_overview(url: str, timeout_s: float = 10.0) -> Overview:
    endpoint = url.rstrip("/") + "/api/v1/status"
    try:  # nothing listening is known within the connect timeout; a busy monitor gets the read timeout
        answer = httpx.get(endpoint, timeout=httpx.Timeout(timeout_s, connect=2.0), trust_env=False)
        answer.raise_for_status()
        data = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise StatusError(f"{endpoint}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("overview"), dict):
        raise StatusError(f"{endpoint}: no overview in the answer (a monitor older than `infermon status`?)")
    overview: Overview = data["overview"]  # the shape the monitor wrote (monitor/web/shapes.py)
    return overview


def exit_code(overview: Overview) -> int:
    return 0 if overview.get("ok") else 1


def print_overview(console: Console, o: Overview, url: str) -> None:
    layers = Text(f"{url}  ")
    for name, layer in o["layers"].items():
        layers.append(f" {name}: {layer['state']} ", style=_STYLE.get(layer["state"], ""))
    console.print(layers)
    for name, layer in o["layers"].items():
        if layer["detail"]:
            console.print(Text(f"  {name}: {layer['detail']}", style=_STYLE.get(layer["state"], "")))
    for r in o["service"]["rows"]:
        if r.get("baseline") not in (None, "ready"):
            console.print(Text(f"  {r['target']} {r['model']}: {r.get('baseline')}", style="dim"))
    if console.width < WIDE:
        for section in (_service_lines, _trend_lines, _canary_lines, _gpu_lines, _quality_lines, _cost_lines,
                        _alert_lines):
            for line in section(o):
                indent = len(line.plain) - len(line.plain.lstrip(" "))  # a wrapped line keeps its indent
                console.print(Padding(line[indent:], (0, 0, 0, indent)))
    else:
        for table in (_service(o), _trends(o), _canary(o), _gpus(o), _quality(o), _cost(o), _alerts(o)):
            if table.row_count:
                console.print(table)
    console.print(Text("OK" if o.get("ok") else "ATTENTION: something is down or firing",
                       style="bold green" if o.get("ok") else "bold red"))


def _service(o: Overview) -> Table:
    s = o["service"]
    obj = s["objectives"]
    table = Table("target", "model", "up", "req/s", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "errors",
                  "gen tok/s", "run/wait", "KV", title=f"Service (last {s['window']})", title_justify="left")
    for r in s["rows"]:
        table.add_row(r["target"], r.get("model") or "–", _target_state(r),
                      num(r.get("requests_per_second"), 2),
                      *(Text(_quantile(r, key), style=_STYLE[slo(r.get(key), obj[objective])])
                        for key, objective in _LATENCIES),
                      pct(r.get("error_ratio"), 2), num(r.get("generation_tokens_per_second"), 0),
                      f"{num(r.get('running'), 0)}/{num(r.get('waiting'), 0)}", pct(r.get("kv_cache_ratio")))
    notes = dict.fromkeys([*(f"{r['target']}: {r['note']}" for r in s["rows"] if r.get("note")),
                           *(f"{r['target']} {r['model']}: {r.get('facts')}" for r in s["rows"] if r.get("facts"))])
    if notes:
        table.caption, table.caption_justify = "\n".join(notes), "left"
    return table


_TARGET_STATES = {"up": ("up", "green"), "stale": ("stale", "yellow"), "down": ("DOWN", "bold red"),
                  "waiting": ("waiting for the first scrape", "dim"),
                  "unrecognized": ("engine not recognised", "yellow")}


def _target_state(row: TargetRow | ModelRow) -> Text:
    state = row.get("state") or ("up" if row["up"] else "down")
    text, style = _TARGET_STATES.get(state, (state, ""))
    return Text(text, style=style)


_Objective = Literal["ttft_seconds", "tpot_seconds"]
_LATENCIES: tuple[tuple[str, _Objective], ...] = (
    ("ttft_p50_seconds", "ttft_seconds"), ("ttft_p99_seconds", "ttft_seconds"),
    ("tpot_p50_seconds", "tpot_seconds"), ("tpot_p99_seconds", "tpot_seconds"))


def _quantile(row: TargetRow | ModelRow, key: str) -> str:
    """"ttft_p99_seconds" of a row; "< 10 ms" where all of the window fell under the first bucket."""
    return quantile_ms(row.get(key), row.get(f"{key.split('_')[0]}_below_seconds"))


def _gpus(o: Overview) -> Table:
    table = Table("GPU", "model", "up", "util", "memory", "temp", "power / limit", "clock events", "health",
                  title="Infrastructure", title_justify="left")
    for g in o["infra"]["rows"]:
        table.add_row(f"{g['node']}/{g['gpu']}", g.get("model") or "–",
                      Text("up" if g["up"] else "DOWN", style="green" if g["up"] else "bold red"),
                      pct(g.get("utilization_ratio")), f"{gib(g.get('memory_used_bytes'))} / "
                      f"{gib(g.get('memory_total_bytes'))}", f"{num(g.get('temperature_celsius'), 0)} °C",
                      f"{num(g.get('power_watts'), 0)} / {num(g.get('power_limit_watts'), 0)} W",
                      ", ".join(g.get("clock_events") or []) or "–", _health(g))
    return table


_HEALTH_STYLE = {"critical": "bold red", "warning": "yellow", "ok": "green"}


def _health(g: GpuRow) -> Text:
    """A GPU's health word and its reasons: critical = drain it, warning = reset when convenient."""
    health = g.get("health")
    reasons = ", ".join(g.get("health_reasons") or [])
    return Text(f"{health or '–'}" + (f": {reasons}" if reasons else ""), style=_HEALTH_STYLE.get(health or "", ""))


def _quality(o: Overview) -> Table:
    table = Table("model", "run", "samples", "score", "scores 1-5", "refusals", "hallucinations", "PSI",
                  title="Quality (last run)", title_justify="left")
    for q in o["quality"]["rows"]:
        table.add_row(q["model"], q["date"], num(q.get("samples"), 0), num(q.get("score_mean"), 2),
                      " ".join(str(c) for c in q.get("histogram") or []), pct(q.get("refusal_ratio")),
                      pct(q.get("hallucination_ratio")), num(q.get("psi"), 3))
    return table


def _cost(o: Overview) -> Table:
    c = o["cost"]
    table = Table("spend", "idle", "today", "budget used", "per 1M tokens", title="Cost", title_justify="left")
    if c["configured"]:
        per_million = ", ".join(f"{p['model']} {p['tokens']} {usd(p['usd'])}" for p in c["per_million"]
                                if p["window"] == o["window"])
        budget = pct(c.get("budget_used_ratio"), 0) if c.get("budget_usd") else "no budget"
        table.add_row(f"{usd(c.get('usd_per_hour'))}/h", f"{usd(c.get('idle_usd_per_hour'))}/h",
                      usd(c.get("today_usd")), budget, per_million or "–")
    return table


def _alerts(o: Overview) -> Table:
    table = Table("alert", "state", "labels", "summary", "delivery", title=_alerts_title(o["alerts"]),
                  title_justify="left")
    for a in o["alerts"]["active"]:
        labels = " ".join(f"{k}={v}" for k, v in a["labels"].items() if k not in ("alertname", "severity", "layer"))
        summary = a["annotations"].get("summary", "")
        if a.get("probable_cause"):
            summary += f"\nprobable cause: {a['probable_cause']}"
        table.add_row(a["name"], Text(a["state"], style="bold red" if a["state"] == "firing" else "yellow"), labels,
                      summary, " ".join(f"{k}: {v}" for k, v in a["deliveries"].items()) or "–")
    return table


def _canary(o: Overview) -> Table:
    table = Table("canary", "model", "last probe", "TTFT", "gap to the engine", "whole answer", title="Canary",
                  title_justify="left")
    for c in o.get("canary", []):
        table.add_row(c["name"] + (f" → {c['target']}" if c.get("target") else ""), c.get("model") or "–",
                      _probe(c), ms(c.get("ttft_seconds")), ms(c.get("ttft_gap_seconds")), ms(c.get("e2e_seconds")))
    return table


def _probe(c: CanaryRow) -> Text:
    if not c.get("outcome"):
        return Text("not yet", style="dim")
    text = Text(str(c["outcome"]), style="green" if c.get("up") else "bold red")
    return text.append(f" {c.get('detail')}" if c.get("detail") else "")


def _head(title: str) -> Text:
    return Text(title, style="bold")


def _service_lines(o: Overview) -> list[Text]:
    s = o["service"]
    obj = s["objectives"]
    lines = [_head(f"Service (last {s['window']})")] if s["rows"] else []
    for r in s["rows"]:
        line = Text(f"  {r['target']}  ").append("up" if r["up"] else "DOWN", style="green" if r["up"] else "bold red")
        lines.append(line.append(f"  {r.get('model') or '–'}"))
        lines.append(Text(f"    {num(r.get('requests_per_second'), 2)} req/s  errors {pct(r.get('error_ratio'), 2)}  "
                          f"{num(r.get('generation_tokens_per_second'), 0)} tok/s  run/wait "
                          f"{num(r.get('running'), 0)}/{num(r.get('waiting'), 0)}  KV {pct(r.get('kv_cache_ratio'))}"))
        latency = Text("    ")
        for (key, objective), label in zip(_LATENCIES, ("TTFT P50", "P99", "  TPOT P50", "P99"), strict=True):
            latency.append(f"{label} ").append(_quantile(r, key), style=_STYLE[slo(r.get(key), obj[objective])])
            latency.append(" ")
        lines.append(latency)
        if r.get("facts"):
            lines.append(Text(f"    {r.get('facts')}", style="dim"))
    return lines


_BARS = "▁▂▃▄▅▆▇█"


def bars(values: list[float | None]) -> str:
    """The daily values as one block character each (a space for a day without a point)."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    return "".join(" " if v is None else _BARS[min(7, int((v - low) / span * 8))] for v in values)


def _trend_text(t: TrendRow) -> Text:
    text = Text(f"P99 TTFT {ms(t.get('now'))}, ")
    text.append(f"{change(t.get('vs_2w'))} vs 2 weeks ago", style=_STYLE[above(t.get("vs_2w"), 0.08, 0.3)])
    return text.append(f" ({change(t.get('vs_1w'))} vs 1 week)  {bars(t.get('daily') or [])}")


def _slope_text(t: TrendRow) -> Text:
    """The creep's growth a day and its crossing ("" where the creep rule's condition does not hold)."""
    text = Text(growth(t.get("per_day"), t.get("growing_days"), bool(t.get("growing_at_least"))), style="yellow")
    when = crossing(t.get("crosses_in_days"), t.get("crosses"))
    if when:
        days = t.get("crosses_in_days")
        text.append(f", {when}", style=_STYLE["bad" if isinstance(days, int | float) and days < 7 else "warn"])
    return text


def _trend_lines(o: Overview) -> list[Text]:
    rows = o.get("trends") or []
    lines = [_head("Week over week")] if rows else []
    for t in rows:
        lines.append(Text(f"  {t['target']}  {t.get('model') or '–'}"))
        lines.append(Text("    ").append(_trend_text(t)))
        if t.get("per_day") is not None:
            lines.append(Text("    ").append(_slope_text(t)))
    return lines


def _trends(o: Overview) -> Table:
    table = Table(title="Week over week (last 6 h vs the same hours before)", title_justify="left", box=None)
    for name in ("target", "model", "P99 TTFT 6 h", "vs 1 week", "vs 2 weeks", "growth a day", "daily P99, 30 days"):
        table.add_column(name, justify="right" if name.startswith(("P99", "vs")) else "left")
    for t in o.get("trends") or []:
        table.add_row(t["target"], t.get("model") or "–", ms(t.get("now")), change(t.get("vs_1w")),
                      Text(change(t.get("vs_2w")), style=_STYLE[above(t.get("vs_2w"), 0.08, 0.3)]),
                      _slope_text(t), bars(t.get("daily") or []))
    return table


def _canary_lines(o: Overview) -> list[Text]:
    lines = [_head("Canary")] if o.get("canary") else []
    for c in o.get("canary", []):
        line = Text(f"  {c['name']}" + (f" → {c['target']}" if c.get("target") else "") + "  ").append(_probe(c))
        lines.append(line.append(f"  TTFT {ms(c.get('ttft_seconds'))}  gap {ms(c.get('ttft_gap_seconds'))}"))
    return lines


def _gpu_lines(o: Overview) -> list[Text]:
    rows = o["infra"]["rows"]
    lines = [_head("Infrastructure")] if rows else []
    for g in rows:
        line = Text(f"  {g['node']}/{g['gpu']}  ").append("up" if g["up"] else "DOWN",
                                                         style="green" if g["up"] else "bold red")
        lines.append(line.append(f"  {g.get('model') or '–'}"))
        lines.append(Text(f"    util {pct(g.get('utilization_ratio'))}  memory {gib(g.get('memory_used_bytes'))} / "
                          f"{gib(g.get('memory_total_bytes'))}  {num(g.get('temperature_celsius'), 0)} °C  "
                          f"{num(g.get('power_watts'), 0)} / {num(g.get('power_limit_watts'), 0)} W  clocks "
                          + (", ".join(g.get("clock_events") or []) or "–")))
        if g.get("health"):
            lines.append(Text("    health ").append(_health(g)))
    return lines


def _quality_lines(o: Overview) -> list[Text]:
    rows = o["quality"]["rows"]
    lines = [_head("Quality (last run)")] if rows else []
    for q in rows:
        lines.append(Text(f"  {q['model']}  {q['date']}"))
        lines.append(Text(f"    {num(q.get('samples'), 0)} samples  score {num(q.get('score_mean'), 2)}  refusals "
                          f"{pct(q.get('refusal_ratio'))}  hallucinations {pct(q.get('hallucination_ratio'))}  "
                          f"PSI {num(q.get('psi'), 3)}"))
        if q.get("failed") or q.get("judge_changed"):
            lines.append(Text(f"    {q.get('failed') or q.get('judge_changed')}", style="bold red"))
    return lines


def _cost_lines(o: Overview) -> list[Text]:
    c = o["cost"]
    if not c["configured"]:
        return []
    budget = f" ({pct(c.get('budget_used_ratio'), 0)} of {usd(c.get('budget_usd'), 0)})" if c.get("budget_usd") else ""
    lines = [_head("Cost"), Text(f"  {usd(c.get('usd_per_hour'))}/h  idle {usd(c.get('idle_usd_per_hour'))}/h  "
                                 f"today {usd(c.get('today_usd'))}{budget}")]
    by_model: dict[str, list[str]] = {}
    fleet: list[PerMillion] = [{**p, "model": "fleet"} for p in c.get("fleet_per_million", [])]
    for p in [*fleet, *c["per_million"]]:
        if p["window"] == o["window"]:
            by_model.setdefault(p["model"], []).append(f"{p['tokens']} {usd(p['usd'])}")
    for model, prices in by_model.items():
        lines.append(Text(f"  per 1M tokens, {model}: {', '.join(prices)}"))
    if c.get("unmapped_targets"):
        lines.append(Text(f"  not mapped to GPUs: {', '.join(c['unmapped_targets'])}", style="yellow"))
    return lines


def _alerts_title(alerts: AlertsSection) -> str:
    """"Alerts (3 firing, 1 pending)", and which of them are listed when not all are."""
    shown, total = len(alerts["active"]), alerts["firing"] + alerts["pending"]
    more = f"; the first {shown}, firing first: all at /api/v1/alerts" if shown < total else ""
    return f"Alerts ({alerts['firing']} firing, {alerts['pending']} pending{more})"


def _alert_lines(o: Overview) -> list[Text]:
    active = o["alerts"]["active"]
    lines = [_head(_alerts_title(o["alerts"]))] if active else []
    for a in active:
        labels = " ".join(f"{k}={v}" for k, v in a["labels"].items() if k not in ("alertname", "severity", "layer"))
        lines.append(Text("  ").append(a["state"], style="bold red" if a["state"] == "firing" else "yellow")
                     .append(f"  {a['name']}  {labels}"))
        lines.append(Text(f"    {a['annotations'].get('summary', '')}"))
        if a.get("probable_cause"):
            lines.append(Text(f"    probable cause: {a['probable_cause']}"))
        if a["state"] == "firing" and a["deliveries"]:
            lines.append(Text("    delivery: " + " ".join(f"{k} {v}" for k, v in a["deliveries"].items())))
    return lines
