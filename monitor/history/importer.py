"""Seed the history from a Prometheus that already scraped the monitor: weeks of trend at once.

For each series the history keeps (the trend rules' selectors and `history.series`), one range
query over the days asked for, `avg_over_time(<selector>[299s])` at a 5-minute step: the mean of
the scraped values of each bucket (t - 5m, t], the point the keeper itself would have made of
them. The answer is written as the history's day rows, merged with any point already stored
(a point the monitor kept itself wins). Long spans go in chunks (Prometheus answers at most
11,000 points a series per query). The queries run a few at a time (`concurrency`): most of an
import is Prometheus answering, and it answers several queries at once on its cores. A selector
whose series another one already reads (the rules' `{quantile="0.99",window="5m",target!=""}` under
the overview's `{quantile="0.99",window="5m"}`) is not asked for again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import numpy as np

from monitor.history.keeper import Wanted
from monitor.history.store import DAY, SLOTS, STEP, HistoryTables, StoredDay, series_key

SCRAPE_LABELS = ("job", "instance")  # what Prometheus' scrape adds to the monitor's series
CHUNK = 10_000 * STEP  # seconds per range query: under Prometheus' 11,000 points a series
CONCURRENCY = 4  # range queries in flight at once


class HistoryImportError(RuntimeError):
    """Prometheus could not be read: the message says what it answered (never the URL's credentials)."""


@dataclass(frozen=True)
class Imported:
    series: int
    points: int
    days: int
    seconds: float


def selector_text(wanted: Wanted) -> str:
    matchers = ",".join(f'{m.label}{m.op}"{_quoted(m.value)}"' for m in wanted.matchers)
    return f"{wanted.name}{{{matchers}}}" if matchers else wanted.name


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def import_prometheus(client: httpx.Client, wanted: Iterable[Wanted], start: float, end: float,
                      tables: HistoryTables, progress: Callable[[str], None] | None = None,
                      drop: Iterable[str] = SCRAPE_LABELS, concurrency: int = CONCURRENCY) -> Imported:
    """Read [start, end] of every wanted series from the Prometheus `client` points at, and store it.
    The labels in `drop` (those the scrape added: job, instance) are removed, so a series has the
    labels of the monitor's own /metrics, the ones it keeps the same series under. At most
    `concurrency` range queries are in flight at once (the client is shared by the threads)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    dropped = {"__name__", *drop}
    began = time.monotonic()
    first = int(np.ceil(start / STEP)) * STEP
    last = int(end // STEP) * STEP
    days: dict[tuple[str, int], StoredDay] = {}
    names: dict[str, tuple[str, dict[str, str]]] = {}
    points = 0
    selectors = covering(wanted)
    queries = [(item, f"avg_over_time({selector_text(item)}[{STEP - 1}s])",  # (t - 5m, t] on Prometheus 2 and 3
                chunk_start, min(last, chunk_start + CHUNK - STEP))
               for item in selectors for chunk_start in range(first, last + 1, CHUNK)]
    answers = _answers(client, [(query, a, b) for _, query, a, b in queries], concurrency)
    for (item, _, _, chunk_end), answer in zip(queries, answers, strict=True):  # in order, as they come
        for found, values in answer:
            labels = {k: v for k, v in found.items() if k not in dropped}
            key = series_key(item.name, labels)
            names[key] = (item.name, labels)
            for ts, value in values:
                day, slot = divmod(round(float(ts)) // STEP, SLOTS)
                stored = days.get((key, day))
                if stored is None:
                    stored = days[(key, day)] = StoredDay(item.name, labels, day, np.full(SLOTS, np.nan))
                stored.points[slot] = float(value)
                points += 1
        if progress is not None and chunk_end == last:  # the item's last chunk
            progress(f"{selector_text(item)}: {sum(1 for k in names if names[k][0] == item.name)} series")
    merged = _merged(tables, list(days.values()), first // DAY)
    tables.write(merged)
    return Imported(len(names), points, len({day for _, day in days}), time.monotonic() - began)


def covering(wanted: Iterable[Wanted]) -> list[Wanted]:
    """The selectors to ask for: each wanted one, less those whose series another one reads already
    (`{quantile=~"0.5|0.99",window="5m"}` reads every series `{quantile="0.99",window="5m",target!=""}`
    does); of two that read the same series, the first."""
    items = list(dict.fromkeys(wanted))
    return [item for i, item in enumerate(items)
            if not any(j != i and covers(other, item) and (j < i or not covers(item, other))
                       for j, other in enumerate(items))]


def covers(wide: Wanted, narrow: Wanted) -> bool:
    """Every series `narrow` selects, `wide` selects too: each of wide's matchers follows from one
    of narrow's (the same matcher, or `label="v"` where wide's matcher takes v)."""
    return wide.name == narrow.name and all(
        any(mine == theirs or (mine.op == "=" and mine.label == theirs.label
                               and theirs.matches({mine.label: mine.value})) for mine in narrow.matchers)
        for theirs in wide.matchers)


def _answers(client: httpx.Client, queries: list[tuple[str, int, int]],
             concurrency: int) -> Iterator[list[tuple[dict[str, str], list[list[str]]]]]:
    """Each query's answer, in the order asked, at most `concurrency` in flight; the first failure
    is raised and the queries not yet sent are dropped."""
    if concurrency == 1 or len(queries) <= 1:
        yield from (_range(client, *query) for query in queries)
        return
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="history-import")
    try:
        yield from pool.map(lambda query: _range(client, *query), queries)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _range(client: httpx.Client, query: str, start: int, end: int) -> list[tuple[dict[str, str], list[list[str]]]]:
    try:
        response = client.get("/api/v1/query_range",
                              params={"query": query, "start": str(start), "end": str(end), "step": str(STEP)})
    except httpx.HTTPError as exc:
        raise HistoryImportError(f"Prometheus did not answer: {type(exc).__name__}") from None
    if response.status_code != 200:
        try:
            error = response.json().get("error", "")
        except ValueError:
            error = response.text[:200]
        raise HistoryImportError(f"Prometheus answered HTTP {response.status_code} to {query!r}: {error}")
    try:
        data = response.json()["data"]
        result = data["result"] if data["resultType"] == "matrix" else None
    except (ValueError, KeyError, TypeError):
        result = None
    if result is None:
        raise HistoryImportError(f"Prometheus' answer to {query!r} is not a range query's matrix")
    return [(item["metric"], item["values"]) for item in result]


def _merged(tables: HistoryTables, imported: list[StoredDay], from_day: int) -> list[StoredDay]:
    """The imported days with the points already stored laid over them (the monitor's own win)."""
    stored = {(series_key(d.name, d.labels), d.day): d for d in tables.read(from_day, {d.name for d in imported})}
    out = []
    for day in imported:
        here = stored.get((series_key(day.name, day.labels), day.day))
        points = day.points if here is None else np.where(np.isnan(here.points), day.points, here.points)
        out.append(StoredDay(day.name, day.labels, day.day, points))
    return out
