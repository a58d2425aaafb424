"""A target's scraped series, aligned on scrape times, so a window's rate is O(1) per series.

Every series of one target is sampled at the same instants (one scrape = one column), so a
window selects the same column range for all of them. Per series (row) we keep, next to each
value, the running sum of counter-reset corrections and the running count of present samples;
Prometheus' reset-corrected increase between two columns is then `v[j] - v[i] + corr[j] -
corr[i]`, with no walk over the samples in between, and numpy does it for every row at once.
A series missing from a scrape holds NaN there.

    store.append(snapshot)                      # after each scrape
    store.rates(start, end) -> {(kind, metric, model, le): summed rate}
    store.family_rates(start, end) -> ((kind, metric, model), {le: summed rate}), ...
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.promtext import Labels
from monitor.service.extract import Snapshot

SeriesKey = tuple[str, str, str, Labels, float | None]
"""(kind "counter"|"bucket"|"http", our metric, model, series labels, le for buckets)"""
GroupKey = tuple[str, str, str, float | None]
"""A series key without its labels: what rates are summed by (`sum by (le, model)`)."""

Family = tuple[str, str, str]
"""(kind, our metric, model): the series a snapshot keeps in one dict."""
KeyOf = Callable[[Family, Any], SeriesKey]

_TRIM_BATCH = 16  # drop old columns in batches: each drop copies the arrays
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class _Layout:
    groups: int  # how many groups it was built for
    families: list[Family]
    les: list[tuple[float | None, ...]]  # per family, its groups' `le` (None: a counter)
    order: Ints  # group ids, family by family
    starts: Ints  # where each family's groups start in `order`
    ends: list[int]
    sizes: list[int]


class SeriesStore:
    def __init__(self, retention_seconds: float) -> None:
        self.retention = retention_seconds
        self.clear()

    def clear(self) -> None:
        self.times: list[int] = []  # scrape times in integer milliseconds, as Prometheus stores them
        self.keys: dict[SeriesKey, int] = {}  # series -> row
        self._group_ids: dict[GroupKey, int] = {}
        self._groups: list[GroupKey] = []
        self._group_of = np.zeros(0, dtype=np.int64)
        self._values: Floats = np.full((0, 0), math.nan)
        self._corr: Floats = np.zeros((0, 0))
        self._present = np.zeros((0, 0), dtype=np.int64)
        self._last_valid: Floats = np.full(0, math.nan)
        self._family_rows: dict[Family, tuple[tuple[Any, ...], Ints]] = {}  # rows move: cleared then
        self._layout_cache: _Layout | None = None

    def append(self, snap: Snapshot) -> None:
        # The column first: trimming it may drop rows that aged out and move the others up, so
        # rows are looked up after it (before, a row dropped here moved this scrape's values to
        # the wrong rows, or out of range: the scrape failed).
        column = self._add_column(to_ms(snap.ts))
        rows: list[Ints] = []
        values: list[float] = []
        for family, series, key_of in _families(snap):
            rows.append(self._rows(family, series, key_of))
            values.extend(series.values())
        n = len(self.keys)
        scraped = np.full(n, math.nan)
        if rows:
            scraped[np.concatenate(rows)] = values
        valid = ~np.isnan(scraped)
        last = self._last_valid[:n]
        with np.errstate(invalid="ignore"):
            reset = valid & (scraped < last)  # a counter reset: Prometheus adds back the value before it
        previous_corr = self._corr[:n, column - 1] if column else 0.0
        previous_present = self._present[:n, column - 1] if column else 0
        self._values[:n, column] = scraped
        self._corr[:n, column] = previous_corr + np.where(reset, last, 0.0)
        self._present[:n, column] = previous_present + valid
        self._last_valid[:n] = np.where(valid, scraped, last)

    def _rows(self, family: Family, series: dict[Any, float], key_of: KeyOf) -> Ints:
        """The rows of one family's series, in the dict's order: as last time when its keys are the
        same (the same objects, scrape after scrape: one comparison in C), else looked up."""
        keys = tuple(series)
        known = self._family_rows.get(family)
        if known is not None and known[0] == keys:
            return known[1]
        rows = np.fromiter((self._row(key_of(family, key)) for key in keys), dtype=np.int64, count=len(keys))
        self._family_rows[family] = (keys, rows)
        return rows

    def _row(self, key: SeriesKey) -> int:
        row = self.keys.get(key)
        return self._add_row(key) if row is None else row

    def rates(self, start: float, end: float) -> dict[GroupKey, float]:
        """Sum of Prometheus `rate()` per group over (start, end]: left-open, as Prometheus 3.x selects."""
        summed = self._group_rates(start, end)
        if summed is None:
            return {}
        sums, seen = summed
        return dict(zip(map(self._groups.__getitem__, seen.tolist()), sums[seen].tolist(), strict=True))

    def family_rates(self, start: float, end: float) -> Iterator[tuple[Family, dict[float | None, float]]]:
        """`rates()` by family: each (kind, metric, model) with its groups' rates by `le` (None for
        a counter), in the order the families first appeared; a family without a rate is left out.

        What a derivation reads, without a tuple key to unpack and a dict to look up per group.
        """
        summed = self._group_rates(start, end)
        if summed is None:
            return
        sums, seen = summed
        layout = self._layout()
        present = np.zeros(len(self._groups), dtype=bool)
        present[seen] = True
        values = sums[layout.order].tolist()
        found = present[layout.order]
        complete = np.add.reduceat(found, layout.starts).tolist()
        for family, les, begin, end_at, size, n in zip(layout.families, layout.les, layout.starts.tolist(),
                                                        layout.ends, layout.sizes, complete, strict=True):
            if n == size:
                yield family, dict(zip(les, values[begin:end_at], strict=True))
            elif n:
                kept = found[begin:end_at].tolist()
                yield family, {le: v for le, v, ok in zip(les, values[begin:end_at], kept, strict=True) if ok}

    def _layout(self) -> _Layout:
        """The groups ordered by family (groups are only ever added: rebuilt when one is)."""
        if self._layout_cache is not None and self._layout_cache.groups == len(self._groups):
            return self._layout_cache
        by_family: dict[Family, list[int]] = {}
        for group_id, (kind, metric, model, _) in enumerate(self._groups):
            by_family.setdefault((kind, metric, model), []).append(group_id)
        order = [group_id for ids in by_family.values() for group_id in ids]
        sizes = [len(ids) for ids in by_family.values()]
        ends = np.cumsum(sizes).tolist()
        self._layout_cache = _Layout(
            groups=len(self._groups),
            families=list(by_family),
            les=[tuple(self._groups[group_id][3] for group_id in ids) for ids in by_family.values()],
            order=np.asarray(order, dtype=np.int64),
            starts=np.asarray([0, *ends[:-1]], dtype=np.int64),
            ends=ends,
            sizes=sizes,
        )
        return self._layout_cache

    def _group_rates(self, start: float, end: float) -> tuple[Floats, Ints] | None:
        """Per group: the summed rate (by group id), and the ids of the groups that have one."""
        # Durations from integer milliseconds, like Prometheus: float seconds near 1.8e9 would
        # carry ~1e-7 s of rounding into every extrapolation.
        end_ms = to_ms(end)
        start_ms = end_ms - to_ms(end - start)  # the range is the window back from the end
        first = bisect_right(self.times, start_ms)  # a sample exactly at the left edge is out
        last = bisect_right(self.times, end_ms) - 1
        n = len(self.keys)
        if last - first < 1 or n == 0:
            return None
        rows, a, b = self._ends(n, first, last)
        times = np.asarray(self.times, dtype=np.int64)
        t0, t1 = (times[a] - start_ms) / 1000, (times[b] - start_ms) / 1000
        v0 = self._values[rows, a]
        increase = self._values[rows, b] - v0 + self._corr[rows, b] - self._corr[rows, a]
        count = self._present[rows, b] - self._present[rows, a] + 1
        seconds = (end_ms - start_ms) / 1000
        total = _extrapolate(increase, t0, t1, v0, count, seconds) / seconds
        keep = ~np.isnan(total)
        groups = self._group_of[rows[keep]]
        weighted = np.bincount(groups, weights=total[keep], minlength=len(self._groups))
        sums: Floats = weighted.astype(np.float64, copy=False)
        seen: Ints = np.nonzero(np.bincount(groups, minlength=len(self._groups)))[0].astype(np.int64, copy=False)
        return sums, seen

    def _ends(self, n: int, first: int, last: int) -> tuple[Ints, Ints, Ints]:
        """The rows with two samples or more in columns first..last, and each one's first and last
        sampled column. Almost every row holds both end columns; only the others are scanned."""
        values = self._values
        ends = ~(np.isnan(values[:n, first]) | np.isnan(values[:n, last]))
        if ends.all():
            rows = np.arange(n)
            return rows, np.full(n, first), np.full(n, last)
        a, b = np.full(n, first), np.full(n, last)
        odd = np.nonzero(~ends)[0]
        valid = ~np.isnan(values[odd, first : last + 1])
        first_valid = np.argmax(valid, axis=1)
        last_valid = last - first - np.argmax(valid[:, ::-1], axis=1)
        a[odd], b[odd] = first + first_valid, first + last_valid
        keep = ends.copy()
        keep[odd] = valid.any(axis=1) & (last_valid > first_valid)
        rows = np.nonzero(keep)[0]
        return rows, a[rows], b[rows]

    def earliest(self, kind: str, metric: str, start: float, end: float) -> dict[str, float]:
        """Per model, the time (s) of the first sample of `metric` in (start, end]: how far back it reaches."""
        end_ms = to_ms(end)
        start_ms = end_ms - to_ms(end - start)
        first = bisect_right(self.times, start_ms)
        last = bisect_right(self.times, end_ms)
        found: dict[str, float] = {}
        if first >= last:
            return found
        for (k, name, model, _, _), row in self.keys.items():
            if k != kind or name != metric:
                continue
            valid = np.nonzero(~np.isnan(self._values[row, first:last]))[0]
            if valid.size:
                ts = self.times[first + int(valid[0])] / 1000
                found[model] = min(ts, found.get(model, ts))
        return found

    def _add_row(self, key: SeriesKey) -> int:
        row = len(self.keys)
        if row == self._values.shape[0]:
            self._resize(max(16, 2 * row), self._values.shape[1])
        kind, metric, model, _, le = key
        group = (kind, metric, model, le)
        if group not in self._group_ids:
            self._group_ids[group] = len(self._groups)
            self._groups.append(group)
        self._group_of[row] = self._group_ids[group]
        self.keys[key] = row
        return row  # a series that appears late is absent (NaN) from the earlier columns

    def _add_column(self, ts_ms: int) -> int:
        self._trim(ts_ms, force=len(self.times) == self._values.shape[1])
        if len(self.times) == self._values.shape[1]:
            self._resize(self._values.shape[0], max(32, 2 * len(self.times)))
        self.times.append(ts_ms)
        return len(self.times) - 1

    def _trim(self, now_ms: int, force: bool) -> None:
        cut = bisect_left(self.times, now_ms - to_ms(self.retention))
        if cut == 0 or (cut < _TRIM_BATCH and not force):
            return
        del self.times[:cut]
        kept = len(self.times)
        for array in (self._values, self._corr, self._present):
            array[:, :kept] = array[:, cut : cut + kept]
        self._values[:, kept:] = math.nan
        self._corr[:, kept:] = 0.0
        self._present[:, kept:] = 0
        self._drop_empty_rows(kept)

    def _drop_empty_rows(self, kept: int) -> None:
        n = len(self.keys)
        if n == 0:
            return
        alive = ~np.isnan(self._values[:n, :kept]).all(axis=1) if kept else np.zeros(n, dtype=bool)
        if alive.all():
            return
        order = np.nonzero(alive)[0]
        for array in (self._values, self._corr, self._present):
            array[: len(order)] = array[order]
        self._last_valid[: len(order)] = self._last_valid[order]
        self._group_of[: len(order)] = self._group_of[order]
        self._values[len(order) :] = math.nan
        self._corr[len(order) :] = 0.0
        self._present[len(order) :] = 0
        self._last_valid[len(order) :] = math.nan
        new_index = {int(old): new for new, old in enumerate(order)}
        self.keys = {key: new_index[row] for key, row in self.keys.items() if row in new_index}
        self._family_rows.clear()

    def _resize(self, rows: int, columns: int) -> None:
        old_rows, old_columns = self._values.shape
        values = np.full((rows, columns), math.nan)
        corr = np.zeros((rows, columns))
        present = np.zeros((rows, columns), dtype=np.int64)
        values[:old_rows, :old_columns] = self._values
        corr[:old_rows, :old_columns] = self._corr
        present[:old_rows, :old_columns] = self._present
        self._values, self._corr, self._present = values, corr, present
        last_valid = np.full(rows, math.nan)
        last_valid[:old_rows] = self._last_valid
        group_of = np.zeros(rows, dtype=np.int64)
        group_of[:old_rows] = self._group_of
        self._last_valid, self._group_of = last_valid, group_of


def _extrapolate(
    increase: Floats, t0: Floats, t1: Floats, v0: Floats, count: npt.NDArray[np.int64], seconds: float
) -> Floats:
    """promql.extrapolate for many series at once (times relative to the range start, which is 0)."""
    sampled = t1 - t0
    with np.errstate(divide="ignore", invalid="ignore"):
        average_step = sampled / (count - 1)
        threshold = average_step * 1.1
        to_start = np.where(t0 >= threshold, average_step / 2, t0)
        clamp = (increase > 0) & (v0 >= 0)
        to_start = np.where(clamp, np.minimum(to_start, sampled * (v0 / increase)), to_start)
        to_end = seconds - t1
        to_end = np.where(to_end >= threshold, average_step / 2, to_end)
        total = increase * (sampled + to_start + to_end) / sampled
    return np.where(sampled > 0, total, math.nan)


def to_ms(seconds: float) -> int:
    return round(seconds * 1000)


def _families(snap: Snapshot) -> Iterator[tuple[Family, dict[Any, float], KeyOf]]:
    """Each (kind, metric, model)'s series of a snapshot, with how a series' key is made."""
    for metric, by_model in snap.counters.items():
        for model, series in by_model.items():
            yield ("counter", metric, model), series, _plain_key
    for metric, by_model_buckets in snap.buckets.items():
        for model, buckets in by_model_buckets.items():
            yield ("bucket", metric, model), buckets, _bucket_key
    for kind, http_series in snap.http.items():
        yield ("http", kind, ""), http_series, _plain_key


def _plain_key(family: Family, labels: Labels) -> SeriesKey:
    return (*family, labels, None)


def _bucket_key(family: Family, bucket: tuple[Labels, float]) -> SeriesKey:
    return (*family, *bucket)
