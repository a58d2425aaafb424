"""`infermon status`: the overview of a running monitor in the terminal (rich tables).

Reads `/api/v1/status` (its "overview" key: the same numbers as the page at `/`). Exit codes
for cron jobs and readiness scripts: 0 every layer fine, 1 something down or firing, 2 the
monitor could not be asked.
"""

from __future__ import annotations

from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from monitor.web.page import gib, ms, num, pct, slo, usd

_STYLE = {"ok": "green", "firing": "bold red", "failing": "yellow", "not configured": "dim",
          "good": "green", "warn": "yellow", "bad": "bold red", "": ""}


class StatusError(Exception):
    pass


def fetch_overview(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    endpoint = url.rstrip("/") + "/api/v1/status"
    try:
        answer = httpx.get(endpoint, timeout=timeout_s, trust_env=False)
        answer.raise_for_status()
        data = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise StatusError(f"{endpoint}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("overview"), dict):
        raise StatusError(f"{endpoint}: no overview in the answer (a monitor older than `infermon status`?)")
    overview: dict[str, Any] = data["overview"]
    return overview


def exit_code(overview: dict[str, Any]) -> int:
    return 0 if overview.get("ok") else 1


def print_overview(console: Console, o: dict[str, Any], url: str) -> None:
    layers = Text(f"{url}  ")
    for name, layer in o["layers"].items():
        layers.append(f" {name}: {layer['state']} ", style=_STYLE.get(layer["state"], ""))
    console.print(layers)
    for name, layer in o["layers"].items():
        if layer["detail"]:
            console.print(Text(f"  {name}: {layer['detail']}", style=_STYLE.get(layer["state"], "")))
    for r in o["service"]["rows"]:
        if r.get("baseline") not in (None, "ready"):
            console.print(Text(f"  {r['target']} {r['model']}: {r['baseline']}", style="dim"))
    for table in (_service(o), _gpus(o), _quality(o), _cost(o), _alerts(o)):
        if table.row_count:
            console.print(table)
    console.print(Text("OK" if o.get("ok") else "ATTENTION: something is down or firing",
                       style="bold green" if o.get("ok") else "bold red"))


def _service(o: dict[str, Any]) -> Table:
    s = o["service"]
    obj = s["objectives"]
    table = Table("target", "model", "up", "req/s", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "errors",
                  "gen tok/s", "run/wait", "KV", title=f"Service (last {s['window']})", title_justify="left")
    for r in s["rows"]:
        table.add_row(r["target"], r.get("model") or "–", _target_state(r),
                      num(r.get("requests_per_second"), 2),
                      *(Text(ms(r.get(key)), style=_STYLE[slo(r.get(key), obj[objective])])
                        for key, objective in _LATENCIES),
                      pct(r.get("error_ratio"), 2), num(r.get("generation_tokens_per_second"), 0),
                      f"{num(r.get('running'), 0)}/{num(r.get('waiting'), 0)}", pct(r.get("kv_cache_ratio")))
    return table


_TARGET_STATES = {"up": ("up", "green"), "stale": ("stale", "yellow"), "down": ("DOWN", "bold red"),
                  "waiting": ("waiting for the first scrape", "dim"),
                  "unrecognized": ("engine not recognised", "yellow")}


def _target_state(row: dict[str, Any]) -> Text:
    state = row.get("state") or ("up" if row["up"] else "down")
    text, style = _TARGET_STATES.get(state, (state, ""))
    return Text(text, style=style)


_LATENCIES = (("ttft_p50_seconds", "ttft_seconds"), ("ttft_p99_seconds", "ttft_seconds"),
              ("tpot_p50_seconds", "tpot_seconds"), ("tpot_p99_seconds", "tpot_seconds"))


def _gpus(o: dict[str, Any]) -> Table:
    table = Table("GPU", "model", "up", "util", "memory", "temp", "power / limit", "clock events",
                  title="Infrastructure", title_justify="left")
    for g in o["infra"]["rows"]:
        table.add_row(f"{g['node']}/{g['gpu']}", g.get("model") or "–",
                      Text("up" if g["up"] else "DOWN", style="green" if g["up"] else "bold red"),
                      pct(g.get("utilization_ratio")), f"{gib(g.get('memory_used_bytes'))} / "
                      f"{gib(g.get('memory_total_bytes'))}", f"{num(g.get('temperature_celsius'), 0)} °C",
                      f"{num(g.get('power_watts'), 0)} / {num(g.get('power_limit_watts'), 0)} W",
                      ", ".join(g.get("clock_events") or []) or "–")
    return table


def _quality(o: dict[str, Any]) -> Table:
    table = Table("model", "run", "samples", "score", "scores 1-5", "refusals", "hallucinations", "PSI",
                  title="Quality (last run)", title_justify="left")
    for q in o["quality"]["rows"]:
        table.add_row(q["model"], q["date"], num(q.get("samples"), 0), num(q.get("score_mean"), 2),
                      " ".join(str(c) for c in q.get("histogram") or []), pct(q.get("refusal_ratio")),
                      pct(q.get("hallucination_ratio")), num(q.get("psi"), 3))
    return table


def _cost(o: dict[str, Any]) -> Table:
    c = o["cost"]
    table = Table("spend", "idle", "today", "budget used", "per 1M tokens", title="Cost", title_justify="left")
    if c["configured"]:
        per_million = ", ".join(f"{p['model']} {p['tokens']} {usd(p['usd'])}" for p in c["per_million"]
                                if p["window"] == o["window"])
        budget = pct(c.get("budget_used_ratio"), 0) if c.get("budget_usd") else "no budget"
        table.add_row(f"{usd(c.get('usd_per_hour'))}/h", f"{usd(c.get('idle_usd_per_hour'))}/h",
                      usd(c.get("today_usd")), budget, per_million or "–")
    return table


def _alerts(o: dict[str, Any]) -> Table:
    table = Table("alert", "state", "labels", "summary", "delivery", title="Alerts", title_justify="left")
    for a in o["alerts"]["active"]:
        labels = " ".join(f"{k}={v}" for k, v in a["labels"].items() if k not in ("alertname", "severity", "layer"))
        summary = a["annotations"].get("summary", "")
        if a.get("probable_cause"):
            summary += f"\nprobable cause: {a['probable_cause']}"
        table.add_row(a["name"], Text(a["state"], style="bold red" if a["state"] == "firing" else "yellow"), labels,
                      summary, " ".join(f"{k}: {v}" for k, v in a["deliveries"].items()) or "–")
    return table
