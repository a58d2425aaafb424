"""A target's scraped series, aligned on scrape times, so a window's rate is O(1) per series.

Every series of one target is sampled at the same instants (one scrape = one column), so a
window selects the same column range for all of them. Per series we keep, next to each value,
the running sum of counter-reset corrections and the running count of present samples; then
Prometheus' reset-corrected increase between two columns is `v[j] - v[i] + corr[j] - corr[i]`,
with no walk over the samples in between. A series missing from a scrape holds NaN there.

    store.append(snapshot)                      # after each scrape
    store.rates(start, end) -> {(kind, metric, model, le): summed rate}
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

from monitor.promtext import Labels
from monitor.service.extract import Snapshot
from monitor.service.promql import extrapolate

SeriesKey = tuple[str, str, str, Labels, float | None]
"""(kind "counter"|"bucket"|"http", our metric, model, series labels, le for buckets)"""
GroupKey = tuple[str, str, str, float | None]
"""A series key without its labels: what rates are summed by (`sum by (le, model)`)."""

_TRIM_BATCH = 16  # drop old columns in batches: list prefix deletes are O(columns)


@dataclass
class _Row:
    group: GroupKey
    values: array[float] = field(default_factory=lambda: array("d"))
    corr: array[float] = field(default_factory=lambda: array("d"))  # running reset corrections
    present: array[int] = field(default_factory=lambda: array("l"))  # running count of samples
    last_valid: float = math.nan


class SeriesStore:
    def __init__(self, retention_seconds: float) -> None:
        self.retention = retention_seconds
        self.times: list[int] = []  # scrape times in integer milliseconds, as Prometheus stores them
        self.rows: dict[SeriesKey, _Row] = {}

    def clear(self) -> None:
        self.times.clear()
        self.rows.clear()

    def append(self, snap: Snapshot) -> None:
        column = len(self.times)
        self.times.append(to_ms(snap.ts))
        rows = self.rows
        pushed = 0
        for key, value in _flatten(snap):
            row = rows.get(key)
            if row is None:
                row = rows[key] = _new_row(key, column)
            _push(row, value)
            pushed += 1
        if pushed != len(rows):  # some series were not on this page: they hold NaN here
            for row in rows.values():
                if len(row.values) == column:
                    _push(row, math.nan)
        self._trim(snap.ts)

    def _trim(self, now: float) -> None:
        cut = bisect_left(self.times, to_ms(now - self.retention))
        if cut < _TRIM_BATCH:
            return
        del self.times[:cut]
        for key in list(self.rows):
            row = self.rows[key]
            del row.values[:cut], row.corr[:cut], row.present[:cut]
            if row.present[-1] - (row.present[0] - (0 if math.isnan(row.values[0]) else 1)) == 0:
                del self.rows[key]  # no sample left in the retained columns

    def rates(self, start: float, end: float) -> dict[GroupKey, float]:
        """Sum of Prometheus `rate()` per group over [start, end] (Prometheus 2.x: both ends closed)."""
        # Durations from integer milliseconds, like Prometheus: float seconds near 1.8e9 would
        # carry ~1e-7 s of rounding into every extrapolation.
        end_ms = to_ms(end)
        start_ms = end_ms - to_ms(end - start)  # the range is the window back from the end
        first = bisect_left(self.times, start_ms)
        last = bisect_right(self.times, end_ms) - 1
        sums: dict[GroupKey, float] = {}
        if last - first < 1:
            return sums
        times, seconds = self.times, (end_ms - start_ms) / 1000
        for row in self.rows.values():
            values = row.values
            i, j = first, last
            while i <= j and values[i] != values[i]:  # NaN: the series was absent from that scrape
                i += 1
            while j > i and values[j] != values[j]:
                j -= 1
            if j <= i:
                continue
            count = row.present[j] - row.present[i] + 1
            increase = values[j] - values[i] + row.corr[j] - row.corr[i]
            first_t, last_t = (times[i] - start_ms) / 1000, (times[j] - start_ms) / 1000
            total = extrapolate(increase, first_t, last_t, values[i], count, 0.0, seconds)
            if total is not None:
                sums[row.group] = sums.get(row.group, 0.0) + total / seconds
        return sums


def to_ms(seconds: float) -> int:
    return round(seconds * 1000)


def _new_row(key: SeriesKey, column: int) -> _Row:
    kind, metric, model, _, le = key
    row = _Row(group=(kind, metric, model, le))
    # A series that appears late is absent (NaN) from the earlier columns.
    row.values.extend([math.nan] * column)
    row.corr.extend([0.0] * column)
    row.present.extend([0] * column)
    return row


def _push(row: _Row, value: float) -> None:
    corr = row.corr[-1] if row.corr else 0.0
    present = row.present[-1] if row.present else 0
    if value == value:  # not NaN
        if value < row.last_valid:  # a counter reset: Prometheus adds back the value before it
            corr += row.last_valid
        row.last_valid = value
        present += 1
    row.values.append(value)
    row.corr.append(corr)
    row.present.append(present)


def _flatten(snap: Snapshot) -> Iterator[tuple[SeriesKey, float]]:
    for metric, by_model in snap.counters.items():
        for model, series in by_model.items():
            for labels, value in series.items():
                yield ("counter", metric, model, labels, None), value
    for metric, by_model_buckets in snap.buckets.items():
        for model, buckets in by_model_buckets.items():
            for (labels, le), value in buckets.items():
                yield ("bucket", metric, model, labels, le), value
    for kind, http_series in snap.http.items():
        for labels, value in http_series.items():
            yield ("http", kind, "", labels, None), value
