"""Tables for a person (rich): a result's summary, a comparison, the table across results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from monitor.loadtest.compare import FIGURES, Change
from monitor.loadtest.hypotheses import level_lines
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
QUEUED = 0.2  # without a slot count: requests waiting in the engine, on average, above which it held the load back
# The engine ran more than the client had in flight by more than max(SHARED_BY, SHARED_SHARE x in flight),
# or finished more requests than the client sent by more than SHARED_SHARE of them and SHARED_BY:
# someone else's traffic was on it.
SHARED_BY, SHARED_SHARE = 1.0, 0.25
# The client's event loop runs on one CPU: above this share of it, its own lateness is in the numbers.
CLIENT_SATURATED = 0.8
# Above this share of the client machine's CPUs busy with other work, the client was short of CPU.
OTHER_BUSY = 0.5


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
    # a spread below a thousandth of the mean is float noise of equal repeats: not shown
    if spread.get("n", 0) > 1 and spread.get("stdev") and spread["stdev"] >= 1e-3 * abs(spread["mean"]):
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
    engine = " ".join(str(v) for v in (server.get("engine") or "not observed", server.get("version")) if v)
    slots = f", {server['slots']} slots" if server.get("slots") else ""
    lines.append(f"engine: {engine}{slots}  precision {user.get('precision') or 'not stated'}  "
                 f"note {user.get('note') or '-'}")
    lines.append(lengths_line(work))
    return lines


def lengths_line(work: dict[str, Any]) -> str:
    """"tokens a request (mean): asked 200 in (estimated) / 100 out (max_tokens); served 534 in / 49 out
    (the server's usage)"."""
    asked, served = work.get("lengths") or {}, work.get("served") or {}

    def mean(stats: Any) -> str:
        value = stats.get("mean") if isinstance(stats, dict) else None
        return "-" if value is None else f"{value:.0f}"

    exact = work.get("lengths_exact") or {}
    by_engine = f", {mean(exact.get('input_tokens'))} by the engine's tokenizer" if exact.get("input_tokens") else ""
    text = (f"tokens a request (mean): asked {mean(asked.get('input_tokens'))} in (estimated{by_engine}) / "
            f"{mean(asked.get('output_tokens'))} out (max_tokens)")
    if served.get("input_from") or served.get("output_from"):
        chunks = "chunks" in str(served.get("output_from"))
        estimate = " (output partly or wholly counted by content chunks: an estimate)" if chunks else ""
        text += (f"; served {mean(served.get('input_tokens'))} in / {mean(served.get('output_tokens'))} out "
                 f"(the server's usage){estimate}")
    elif served:
        text += "; served: no usage reported"
    return text


def shortfalls(result: dict[str, Any], share: float = 0.8) -> list[str]:
    """Closed-loop levels at which fewer requests were in flight, averaged over time, than asked:
    the client (its own CPU between a request's end and the next send) limited the load, not the
    engine. In flight is Little's law on the client's clock (throughput x mean time held), not the
    engine's running gauge: polled every half second, the gauge misses short requests and read
    2.3 where 3.9 were in flight. The gauge is quoted beside it, never judged alone."""
    out = []
    queued = _engine_limits(result)  # said by engine_limited: the engine's queue, not the client
    for level in result["levels"]:
        held = figure(level, "in_flight_mean")
        asked = level["level"]["value"]
        if level["level"]["kind"] != "concurrency" or held is None or held["mean"] is None:
            continue
        if level["level"]["label"] in queued:
            continue
        if held["mean"] < share * asked:
            running = figure(level, "engine", "requests_running", "mean")
            gauge = f"; the engine's gauge read {running['mean']:.1f} running" if running and running["mean"] else ""
            out.append(f"{level['level']['label']}: {held['mean']:.1f} requests in flight on average (throughput x "
                       f"mean latency), not {asked:g}: the client limited the load{gauge}")
    return out


def _mean_of(level: dict[str, Any], *path: str) -> float | None:
    value = figure(level, *path)
    return None if value is None or value["mean"] is None else float(value["mean"])


def engine_limited(result: dict[str, Any], queued: float = QUEUED) -> list[str]:
    """Levels at which requests waited in the engine's own queue while it ran as many as it has
    slots (llama-server's `total_slots`, GET /props): the engine's slots were the limit, not the
    client. The polled gauges say that a queue formed (`requests_waiting` above 0 on average) and
    that the slots filled (`requests_running` reached them); how much the engine held back is the
    client's in flight (Little's law, time-averaged) past the slots, since a short request slips
    between two polls of the running gauge. Where the engine publishes no slot count (vLLM's
    max_num_seqs), a queue of more than `queued` on average says the same of its batch limit or
    its KV cache."""
    return [f"{label}: {text}" for label, text in _engine_limits(result, queued).items()]


def _engine_limits(result: dict[str, Any], queued: float = QUEUED) -> dict[str, str]:
    slots = (result.get("conditions") or {}).get("server", {}).get("slots")
    out = {}
    for level in result["levels"]:
        waiting = _mean_of(level, "engine", "requests_waiting", "mean")
        running = _mean_of(level, "engine", "requests_running", "mean")
        fullest = _mean_of(level, "engine", "requests_running", "max")
        held = _mean_of(level, "in_flight_mean")
        if waiting is None or running is None or waiting <= 0:
            continue
        label = level["level"]["label"]
        if slots is not None and fullest is not None and fullest >= slots and (held is None or held > slots):
            beyond = f", while this client held {held:.1f} in flight" if held is not None else ""
            out[label] = (f"the engine's slots were the limit: it ran at most {fullest:.0f} of its {slots} slots "
                          f"(GET /props total_slots) with {waiting:.2f} waiting on average{beyond}; more load only "
                          "queues in the engine (start it with more slots, -np, or compare at fewer users)")
        elif slots is None and waiting > queued:
            out[label] = (f"the engine queued the load: {waiting:.2f} requests waiting on average beside "
                          f"{running:.1f} running; its batch limit (vLLM --max-num-seqs) or its KV cache was the "
                          "limit, not the client")
    return out


def shared(result: dict[str, Any], by: float = SHARED_BY, share: float = SHARED_SHARE) -> list[str]:
    """Levels during which the engine carried traffic besides the benchmark's: it ran more requests
    on average than the client had in flight, or its request counter rose by more than the client
    sent. The latencies then describe the engine under more load than the result says."""
    out = []
    for level in result["levels"]:
        label = level["level"]["label"]
        running = _mean_of(level, "engine", "requests_running", "mean")
        held = _mean_of(level, "in_flight_mean")
        reasons = []
        if running is not None and held is not None and running > held + max(by, share * held):
            reasons.append(f"it ran {running:.1f} requests on average while this client had {held:.1f} in flight")
        windows = level.get("repeats") or ()
        finished = [w.get("engine", {}).get("requests") for w in windows]
        sent = [w.get("requests") for w in windows]
        if windows and all(isinstance(v, int | float) for v in finished + sent):
            engine_total, client_total = sum(finished), sum(sent)
            if engine_total > client_total + max(by, share * client_total):
                reasons.append(f"its request counter rose by {engine_total:.0f}, this client sent {client_total:.0f}")
        if reasons:
            out.append(f"{label}: the benchmark shared the engine: {'; '.join(reasons)}. Its latencies describe "
                       "the engine under that other load too: benchmark an engine no one else is using")
    return out


def client_short(result: dict[str, Any], saturated: float = CLIENT_SATURATED,
                 other: float = OTHER_BUSY) -> list[str]:
    """Levels at which the client was short of CPU: its own process used `saturated` of the one CPU
    its event loop runs on, or other work (the engine too, where it runs on the same machine) kept
    more than `other` of the machine's CPUs busy. A send or a chunk the client reads late is read
    as the server's latency, and on a small machine its CPU comes out of the server's."""
    out = []
    for level in result["levels"]:
        own = _mean_of(level, "client", "client_cpu_ratio")
        busy = _mean_of(level, "client", "machine_busy_ratio")
        cpus = _mean_of(level, "client", "cpu_count")
        reasons = []
        if own is not None and own >= saturated:
            reasons.append(f"the client used {own:.0%} of a CPU (its event loop runs on one)")
        if busy is not None and own is not None and cpus:
            others = busy - own / cpus
            if others > other:
                reasons.append(f"other work kept {others:.0%} of the client machine's {cpus:.0f} CPUs busy")
        if reasons:
            out.append(f"{level['level']['label']}: the client was short of CPU: {'; '.join(reasons)}. Its lateness "
                       "is in the latencies: run it on CPUs of its own, or at a lower load")
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


def warnings(result: dict[str, Any]) -> list[str]:
    """Every sentence the summary and the report add below the numbers; levels that say the same
    thing say it once ("c=1, c=2: 29% of the prompt tokens ...")."""
    labels = {level["level"]["label"] for level in result["levels"]}
    merged: dict[str, list[str]] = {}
    for line in (unhealthy(result) + shared(result) + engine_limited(result) + shortfalls(result)
                 + client_short(result) + cached(result)):
        label, _, text = line.partition(": ")
        key, who = (text, label) if label in labels else (line, "")
        merged.setdefault(key, []).append(who)
    return [f"{', '.join(who)}: {text}" if who[0] else text for text, who in merged.items()]


def print_summary(console: Console, result: dict[str, Any]) -> None:
    """The header, then one table per kind of figure, a figure a row and a level a column (as many
    levels side by side as the console's width holds, the rest below), so that nothing is cut at 80
    columns or in a CI log: a cell too wide folds onto a second line, never ends in "…"."""
    for line in header_lines(result):
        console.print(line, style="bold red" if line.startswith("SYNTHETIC") else None, highlight=False,
                      overflow="fold")
    levels = result["levels"]
    for title, columns in (("latency", LATENCY_COLUMNS), ("throughput, GPU, cost", THROUGHPUT_COLUMNS)):
        rows = [(name, [cell(level, path, unit) for level in levels]) for name, path, unit in columns]
        shown = [(name, cells) for name, cells in rows if any(c != "-" for c in cells)]
        print_stacked(console, f"{title} (mean±stdev over repeats)", [lv["level"]["label"] for lv in levels], shown)
        missing = [name for name, cells in rows if all(c == "-" for c in cells)]
        if missing:
            console.print(f"not measured: {', '.join(missing)}", style="dim", highlight=False, overflow="fold")
    for line in warnings(result):
        console.print(line, style="yellow", highlight=False, overflow="fold")
    for line in level_lines(result):  # KV tier, P/D, MoE: the operators' hypotheses (monitor.loadtest.hypotheses)
        console.print(line, highlight=False, overflow="fold")
    if result.get("stopped"):
        console.print(f"stopped: {result['stopped']}", style="bold red", highlight=False, overflow="fold")


def print_stacked(console: Console, title: str, headers: Sequence[str], rows: Sequence[tuple[str, list[str]]]) -> None:
    """Rows of (name, one cell per header) as tables of as many header columns as fit the console."""
    name_width = max((len(name) for name, _ in rows), default=6)
    widths = [max([len(header)] + [len(cells[i]) for _, cells in rows]) for i, header in enumerate(headers)]
    groups = _fitting(widths, console.width - name_width - 4)
    for number_, group in enumerate(groups, 1):
        part = f" ({number_} of {len(groups)})" if len(groups) > 1 else ""
        console.print(f"{title}{part}", style="bold", highlight=False, overflow="fold")
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column("", no_wrap=True)
        for i in group:
            table.add_column(headers[i], justify="right", overflow="fold")
        for name, cells in rows:
            table.add_row(name, *(cells[i] for i in group))
        console.print(table)


def _fitting(widths: Sequence[int], room: int) -> list[list[int]]:
    """Column indexes in groups whose widths (each with its padding of 2) fit in `room`; one a group at least."""
    groups: list[list[int]] = [[]]
    used = 0
    for i, width in enumerate(widths):
        if groups[-1] and used + width + 2 > room:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += width + 2
    return groups


def print_compare(console: Console, changes: Sequence[Change], names: tuple[str, str]) -> None:
    console.print(f"{names[0]} -> {names[1]} (times in ms)", highlight=False, overflow="fold")
    units = {name: "s" if path[0] in ("ttft_s", "tpot_s", "e2e_s") else ("%" if "ratio" in path[-1] else "")
             for name, path, _ in FIGURES}
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("level", "figure", "A", "B", "change", "noise", ""):
        table.add_column(column, justify="left" if column in ("level", "figure", "") else "right", overflow="fold")
    for ch in changes:
        mark = ("REGRESSION" if ch.worse else "better") if ch.beyond else ""
        style = "bold red" if ch.regression else ("green" if ch.beyond else None)
        table.add_row(ch.level, ch.figure, number(ch.a, units[ch.figure]), number(ch.b, units[ch.figure]),
                      f"{ch.relative * 100:+.1f} %", f"±{ch.noise * 100:.1f} %", mark, style=style)
    console.print(table)


def print_table(console: Console, rows: Sequence[dict[str, Any]]) -> None:
    """Results side by side: a result a column, a figure a row (as many results as fit the width)."""
    shown = ("output tok/s", "requests/s", "TTFT P50", "TTFT P99", "TPOT P50", "E2E P99", "J/token", "$/1M out tok")
    lines: list[tuple[str, list[str]]] = [
        (field, [str(row[field]) for row in rows]) for field in ("gpu", "engine", "precision", "level")]
    lines.append(("capacity", [f"{row['capacity']} users" if row.get("capacity") is not None else "-"
                               for row in rows]))
    for name in shown:
        timed = name.startswith(("TTFT", "TPOT", "E2E"))
        lines.append((f"{name} ms" if timed else name, [number(row[name], "s" if timed else "") for row in rows]))
    print_stacked(console, "results side by side (each at its own level: the one with the most output tok/s "
                           "unless --level)", [row["result"] for row in rows], lines)
