"""Tables for a person (rich): a result's summary, a comparison, the table across results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from monitor.loadtest.compare import FIGURES, Change
from monitor.loadtest.result import figure

# Two tables of (column, path into a level's summary, unit: "s" shows milliseconds, "%" a ratio as percent)
LATENCY_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("TTFT P50 ms", ("ttft_s", "p50"), "s"),
    ("TTFT P95 ms", ("ttft_s", "p95"), "s"),
    ("TTFT P99 ms", ("ttft_s", "p99"), "s"),
    ("TPOT P50 ms", ("tpot_s", "p50"), "s"),
    ("TPOT P99 ms", ("tpot_s", "p99"), "s"),
    ("E2E P50 ms", ("e2e_s", "p50"), "s"),
    ("E2E P99 ms", ("e2e_s", "p99"), "s"),
    ("goodput %", ("goodput_ratio",), "%"),
    ("engine TTFT P99 ms", ("engine", "ttft_s", "p99"), "s"),
)
THROUGHPUT_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("req/s", ("requests_per_s",), ""),
    ("out tok/s", ("output_tokens_per_s",), ""),
    ("total tok/s", ("total_tokens_per_s",), ""),
    ("GPU util %", ("gpu", "utilization_ratio"), "%"),
    ("power W", ("gpu", "power_watts"), ""),
    ("J/token", ("gpu", "joules_per_output_token"), ""),
    ("$/1M out", ("cost", "usd_per_million_output_tokens"), ""),
    ("in flight", ("in_flight_mean",), ""),
    ("server running", ("engine", "requests_running", "mean"), ""),
    ("preempt", ("engine", "preemptions"), ""),
    ("prefix cache %", ("engine", "prefix_cache_hit_ratio"), "%"),
    ("client CPU ms/req", ("client", "client_cpu_ms_per_request"), ""),
)
CACHED_SHARE = 0.2  # above it, a level's prompt tokens came from the prefix cache enough to say so


def number(value: float | None, unit: str = "") -> str:
    """Milliseconds for "s", percent for "%" (the unit is in the column's name)."""
    if value is None:
        return "-"
    if unit == "s":
        value *= 1000
    elif unit == "%":
        value *= 100
    if value == 0:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def spread_text(spread: dict[str, Any] | None, unit: str = "") -> str:
    if spread is None or spread.get("mean") is None:
        return "-"
    text = number(spread["mean"], unit)
    if spread.get("n", 0) > 1 and spread.get("stdev"):
        text += f"±{number(spread['stdev'], unit)}"
    return text


def cell(level: dict[str, Any], path: tuple[str, ...], unit: str) -> str:
    """One figure's text; an engine quantile whose every observation, in every repeat, fell in the
    histogram's first bucket reads "< bound": histogram_quantile()'s number is a share of the bound."""
    if len(path) == 3 and path[0] == "engine":
        bound = figure(level, "engine", "below_first_bound_s", path[1])
        if bound is not None and bound["max"] is not None and bound["n"] == len(level.get("repeats") or ()) > 0:
            return f"< {number(bound['max'], unit)}"
    return spread_text(figure(level, *path), unit)


def header_lines(result: dict[str, Any]) -> list[str]:
    c = result["conditions"]
    work, gpu, server, user = c["workload"], c.get("gpu", {}), c.get("server", {}), c.get("user", {})
    data = work["dataset"]
    lines = [f"{result['model']} at {result['target']}  ({result['created']})"]
    if result.get("synthetic"):
        lines.append("SYNTHETIC DATA: prompts generated, not a data set")
    lines.append(f"data: {data['source']} {data.get('path') or ''} sha256 {str(data.get('sha256'))[:12]}  "
                 f"scenario {work['scenario']['name']}, {work['repeats']} repeat(s) x {work['duration_s']:g} s, "
                 f"{result['warmup']['requests']} warm-up requests excluded")
    lines.append(f"GPU: {gpu.get('count') or 0}x {gpu.get('model') or 'not observed'}, driver "
                 f"{gpu.get('driver') or '-'}, CUDA {gpu.get('cuda') or '-'} ({gpu.get('source') or 'no source'})")
    lines.append(f"engine: {server.get('engine') or 'not observed'} {server.get('version') or ''}  "
                 f"precision {user.get('precision') or 'not stated'}  note {user.get('note') or '-'}")
    return lines


def shortfalls(result: dict[str, Any], share: float = 0.8) -> list[str]:
    """Closed-loop levels at which fewer requests were in flight, averaged over time, than asked:
    the client (its own CPU between a request's end and the next send) limited the load, not the
    engine. In flight is Little's law on the client's clock (throughput x mean time held), not the
    engine's running gauge: polled every half second, the gauge misses short requests and read
    2.3 where 3.9 were in flight. The gauge is quoted beside it, never judged alone."""
    out = []
    for level in result["levels"]:
        held = figure(level, "in_flight_mean")
        asked = level["level"]["value"]
        if level["level"]["kind"] != "concurrency" or held is None or held["mean"] is None:
            continue
        if held["mean"] < share * asked:
            running = figure(level, "engine", "requests_running", "mean")
            gauge = f"; the engine's gauge read {running['mean']:.1f} running" if running and running["mean"] else ""
            out.append(f"{level['level']['label']}: {held['mean']:.1f} requests in flight on average (throughput x "
                       f"mean latency), not {asked:g}: the client limited the load{gauge}")
    return out


def cached(result: dict[str, Any], share: float = CACHED_SHARE) -> list[str]:
    """Levels whose prompt tokens came from the engine's prefix cache for more than `share`."""
    out = []
    for level in result["levels"]:
        hit = figure(level, "engine", "prefix_cache_hit_ratio")
        if hit is not None and hit["mean"] is not None and hit["mean"] > share:
            out.append(f"{level['level']['label']}: {hit['mean']:.0%} of the prompt tokens came from the engine's "
                       "prefix cache: TTFT is understated against prompts it has not seen (a data set that repeats "
                       "prompts, or a shared system prompt)")
    return out


def unhealthy(result: dict[str, Any]) -> list[str]:
    """A GPU that was not healthy when the run began: not a clean benchmark (a pending row remap,
    an XID, uncorrectable ECC errors)."""
    gpu = result.get("conditions", {}).get("gpu", {})
    if gpu.get("health") in (None, "ok"):
        return []
    return [f"GPU health {gpu['health']} when the run began ({'; '.join(gpu.get('health_reasons') or [])}): "
            "not a clean benchmark; reset or replace the GPU and run again"]


def print_summary(console: Console, result: dict[str, Any]) -> None:
    for line in header_lines(result):
        console.print(line, style="bold red" if line.startswith("SYNTHETIC") else None, highlight=False)
    for title, columns in (("latency", LATENCY_COLUMNS), ("throughput, GPU, cost", THROUGHPUT_COLUMNS)):
        table = Table(title=f"{title} (mean±stdev over repeats)", title_justify="left")
        table.add_column("level")
        for name, _, _ in columns:
            table.add_column(name, justify="right")
        for level in result["levels"]:
            cells = [cell(level, path, unit) for _, path, unit in columns]
            table.add_row(level["level"]["label"], *cells)
        console.print(table)
    for line in unhealthy(result) + shortfalls(result) + cached(result):
        console.print(line, style="yellow", highlight=False)
    if result.get("stopped"):
        console.print(f"stopped: {result['stopped']}", style="bold red", highlight=False)


def print_compare(console: Console, changes: Sequence[Change], names: tuple[str, str]) -> None:
    table = Table(title=f"{names[0]} -> {names[1]}", title_justify="left")
    for column in ("level", "figure", "A", "B", "change", "noise", ""):  # times in ms
        table.add_column(column, justify="left" if column in ("level", "figure", "") else "right")
    units = {name: "s" if path[0] in ("ttft_s", "tpot_s", "e2e_s") else ("%" if "ratio" in path[-1] else "")
             for name, path, _ in FIGURES}
    for ch in changes:
        mark = ("REGRESSION" if ch.worse else "better") if ch.beyond else ""
        style = "bold red" if ch.regression else ("green" if ch.beyond else None)
        table.add_row(ch.level, ch.figure, number(ch.a, units[ch.figure]), number(ch.b, units[ch.figure]),
                      f"{ch.relative * 100:+.1f} %", f"±{ch.noise * 100:.1f} %", mark, style=style)
    console.print(table)


def print_table(console: Console, rows: Sequence[dict[str, Any]]) -> None:
    shown = ("output tok/s", "requests/s", "TTFT P50", "TTFT P99", "TPOT P50", "E2E P99", "J/token", "$/1M out tok")
    table = Table(title="results side by side (each at its own level: the one with the most output tok/s "
                        "unless --level)", title_justify="left")
    for column in ("result", "gpu", "engine", "precision", "level", "capacity", *shown):
        table.add_column(column, justify="right" if column in (*shown, "capacity") else "left")
    for row in rows:
        capacity = f"{row['capacity']} users" if row.get("capacity") is not None else "-"
        table.add_row(row["result"], row["gpu"], row["engine"], row["precision"], row["level"], capacity,
                      *(number(row[c], "s" if c.startswith(("TTFT", "TPOT", "E2E")) else "") for c in shown))
    console.print("times in ms", style="dim")
    console.print(table)
