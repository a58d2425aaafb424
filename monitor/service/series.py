"""A target's scraped series, aligned on scrape times, so a window's rate is O(1) per series.

Every series of one target is sampled at the same instants (one scrape = one column), so a
window selects the same column range for all of them. The values are kept scrape by scrape
(`_values[column, row]`: a scrape writes one contiguous row of the array, a window reads two),
and Prometheus' reset-corrected increase between two columns is `v[j] - v[i]` plus the value
before each counter reset in between, with no walk over the samples, numpy doing every row at
once. Resets and gaps are rare: they are kept beside the values (a list of resets, a flag per
row that has missed a scrape) and only their rows get the slower reading. A series missing
from a scrape holds NaN there.

    store.append(snapshot)                      # after each scrape
    store.rates(start, end) -> {(kind, metric, model, le): summed rate}
    store.family_rates(start, end) -> ((kind, metric, model), {le: summed rate}), ...
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.intern import Interned
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
    order: Ints  # group ids, family by family
    starts: Ints  # where each family's groups start in `order`
    # Per family, in the order they first appeared: (family, its groups' `le` (None: a counter),
    # where its groups start and end in `order`, how many there are).
    spans: list[tuple[Family, tuple[float | None, ...], int, int, int]]


class SeriesStore:
    """`reach`: (a counter, seconds): how far back `earliest` answers for that one counter, when
    that is further than the retention. Its samples alone are kept that long, in a store of
    their own: a baseline's rates read one baseline window back, its coverage two (the rows of
    every other series would otherwise be kept twice as long to answer it)."""

    def __init__(self, retention_seconds: float, reach: tuple[str, float] | None = None) -> None:
        self.retention = retention_seconds
        self._reach: tuple[str, SeriesStore] | None = None
        if reach is not None and reach[1] > retention_seconds:
            self._reach = (reach[0], SeriesStore(reach[1]))
        self.clear()

    def clear(self) -> None:
        self.times: list[int] = []  # scrape times in integer milliseconds, as Prometheus stores them
        self.keys: dict[SeriesKey, int] = {}  # series -> row
        self._group_ids: dict[GroupKey, int] = {}
        self._groups: list[GroupKey] = []
        self._group_of = np.zeros(0, dtype=np.int64)
        self._values: Floats = np.full((0, 0), math.nan)  # [column, row]
        self._last_valid: Floats = np.full(0, math.nan)
        # Rows that missed a scrape after their first sample: a window's count of samples is
        # counted for them (every other row has one in each column between its ends).
        self._gappy = np.zeros(0, dtype=bool)
        # Counter resets, in scrape order: their rows, times (ms) and the values before them.
        self._resets: tuple[Ints, Ints, Floats] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                                                   np.zeros(0))
        self._family_rows: dict[Family, tuple[tuple[Any, ...], Ints]] = {}  # rows move: cleared then
        self._layout_cache: _Layout | None = None
        if self._reach is not None:
            self._reach[1].clear()

    def append(self, snap: Snapshot) -> None:
        if self._reach is not None:
            metric, reach = self._reach
            by_model = snap.counters.get(metric)
            reach.append(Snapshot(ts=snap.ts, counters={} if by_model is None else {metric: by_model}))
        # The column first: trimming it may drop rows that aged out and move the others up, so
        # rows are looked up after it (before, a row dropped here moved this scrape's values to
        # the wrong rows, or out of range: the scrape failed).
        column = self._add_column(to_ms(snap.ts))
        rows: list[Ints] = []
        values: list[float] = []
        known = len(self.keys)
        for family, series, key_of in _families(snap):
            rows.append(self._rows(family, series, key_of))
            values.extend(series.values())
        n = len(self.keys)
        if n > known and self._values.shape[1] > n + max(4, n // 32):
            # Rows came (a target's first scrape brings them all): the spare ones doubling made go
            # (doubled and kept, a baseline store of 330 rows kept 512 for its hour of columns).
            self._resize(n + max(4, n // 32), self._values.shape[0])
        scraped = self._values[column, :n]  # NaN: the column is new
        if rows:
            scraped[np.concatenate(rows)] = values
        valid = ~np.isnan(scraped)
        last = self._last_valid[:n]
        if not valid.all():
            self._gappy[:n] |= ~valid & ~np.isnan(last)  # had a sample before, none now
        with np.errstate(invalid="ignore"):
            reset = valid & (scraped < last)  # a counter reset: Prometheus adds back the value before it
        if reset.any():
            reset_rows = np.nonzero(reset)[0]
            self._resets = (np.concatenate((self._resets[0], reset_rows)),
                            np.concatenate((self._resets[1], np.full(reset_rows.size, self.times[column]))),
                            np.concatenate((self._resets[2], last[reset_rows])))
        np.copyto(last, scraped, where=valid)

    def _rows(self, family: Family, series: Mapping[Any, float], key_of: KeyOf) -> Ints:
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
        # Lengths equal by construction: zip's strict check would cost more than the dicts.
        for (family, les, begin, end_at, size), n in zip(layout.spans, complete, strict=False):
            if size == 1 and n:  # a counter's one group (most of a 10-model page's ~200 families)
                yield family, {les[0]: values[begin]}
            elif n == size:
                yield family, dict(zip(les, values[begin:end_at], strict=False))
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
        families = list(by_family)
        les = [tuple(self._groups[group_id][3] for group_id in ids) for ids in by_family.values()]
        starts = [0, *ends[:-1]]
        self._layout_cache = _Layout(
            groups=len(self._groups),
            order=np.asarray(order, dtype=np.int64),
            starts=np.asarray(starts, dtype=np.int64),
            spans=list(zip(families, les, starts, ends, sizes, strict=True)),
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
        ends = self._ends(n, first, last)
        if ends is None:  # every row has a sample in both end columns: one reading for all
            rows: Ints | slice = slice(0, n)
            v0 = self._values[first, :n]
            increase = self._values[last, :n] - v0
            t0: Floats | float = (self.times[first] - start_ms) / 1000
            t1: Floats | float = (self.times[last] - start_ms) / 1000
            count: Ints | int = last - first + 1
            gappy = np.nonzero(self._gappy[:n])[0]
            if gappy.size:  # rows that missed a scrape in between: their samples counted
                count = np.full(n, count)
                count[gappy] = np.count_nonzero(~np.isnan(self._values[first : last + 1, gappy]), axis=0)
            at = np.arange(n)
            a_col: Ints | int = first
            b_col: Ints | int = last
        else:
            rows, a, b, counted = ends
            if not rows.size:  # no row has two samples in the window: no rate (a reset read none)
                return None
            times = np.asarray(self.times, dtype=np.int64)
            t0, t1 = (times[a] - start_ms) / 1000, (times[b] - start_ms) / 1000
            v0 = self._values[a, rows]
            increase = self._values[b, rows] - v0
            count = counted
            at, a_col, b_col = rows, a, b
        if self._resets[0].size:
            increase = self._add_resets(increase, at, a_col, b_col)
        seconds = (end_ms - start_ms) / 1000
        total = _extrapolate(increase, t0, t1, v0, count, seconds) / seconds
        keep = ~np.isnan(total)
        groups = self._group_of[:n][rows][keep]
        weighted = np.bincount(groups, weights=total[keep], minlength=len(self._groups))
        sums: Floats = weighted.astype(np.float64, copy=False)
        seen: Ints = np.nonzero(np.bincount(groups, minlength=len(self._groups)))[0].astype(np.int64, copy=False)
        return sums, seen

    def _add_resets(self, increase: Floats, rows: Ints, a: Ints | int, b: Ints | int) -> Floats:
        """Each read row's increase plus the value before each of its resets between its first and
        last sample in the window (columns `a`, `b`), added in scrape order as Prometheus adds them.
        The sample before such a reset is in the window too: `a` is one, and it came earlier."""
        reset_rows, reset_ms, before = self._resets
        low = self.times[a if isinstance(a, int) else int(a.min())]
        high = self.times[b if isinstance(b, int) else int(b.max())]
        inside = np.nonzero((reset_ms > low) & (reset_ms <= high))[0]
        if not inside.size:
            return increase
        reset_rows, reset_ms, before = reset_rows[inside], reset_ms[inside], before[inside]
        at = np.minimum(np.searchsorted(rows, reset_rows), len(rows) - 1)
        read = rows[at] == reset_rows  # else a row not read: fewer than two samples in the window
        if not isinstance(a, int):
            times = np.asarray(self.times, dtype=np.int64)
            read &= (times[a[at]] < reset_ms) & (reset_ms <= times[np.asarray(b)[at]])
        increase = increase.copy()
        np.add.at(increase, at[read], before[read])  # one after another, in the order they happened
        return increase

    def _ends(self, n: int, first: int, last: int) -> tuple[Ints, Ints, Ints, Ints] | None:
        """None when every row has a sample in both end columns (almost always); else the rows with
        two samples or more in columns first..last, each one's first and last sampled column and
        how many samples it has there. Only the rows without both ends are scanned."""
        values = self._values
        ends = ~(np.isnan(values[first, :n]) | np.isnan(values[last, :n]))
        if ends.all():
            return None
        a, b = np.full(n, first), np.full(n, last)
        count = np.full(n, last - first + 1)
        gappy = np.nonzero(ends & self._gappy[:n])[0]
        if gappy.size:
            count[gappy] = np.count_nonzero(~np.isnan(values[first : last + 1, gappy]), axis=0)
        odd = np.nonzero(~ends)[0]
        valid = ~np.isnan(values[first : last + 1, odd])  # [column, odd row]
        first_valid = np.argmax(valid, axis=0)
        last_valid = last - first - np.argmax(valid[::-1], axis=0)
        a[odd], b[odd] = first + first_valid, first + last_valid
        count[odd] = np.count_nonzero(valid, axis=0)
        keep = ends.copy()
        keep[odd] = valid.any(axis=0) & (last_valid > first_valid)
        rows = np.nonzero(keep)[0]
        return rows, a[rows], b[rows], count[rows]

    def earliest(self, kind: str, metric: str, start: float, end: float) -> dict[str, float]:
        """Per model, the time (s) of the first sample of `metric` in (start, end]: how far back it reaches."""
        if self._reach is not None and kind == "counter" and metric == self._reach[0]:
            return self._reach[1].earliest(kind, metric, start, end)
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
            valid = np.nonzero(~np.isnan(self._values[first:last, row]))[0]
            if valid.size:
                ts = self.times[first + int(valid[0])] / 1000
                found[model] = min(ts, found.get(model, ts))
        return found

    def _add_row(self, key: SeriesKey) -> int:
        row = len(self.keys)
        if row == self._values.shape[1]:
            self._resize(max(16, 2 * row), self._values.shape[0])  # what is spare goes after the scrape
        key = _shared_key(key)
        kind, metric, model, _, le = key
        group = _shared_group((kind, metric, model, le))
        if group not in self._group_ids:
            self._group_ids[group] = len(self._groups)
            self._groups.append(group)
        self._group_of[row] = self._group_ids[group]
        self.keys[key] = row
        return row  # a series that appears late is absent (NaN) from the earlier columns

    def _add_column(self, ts_ms: int) -> int:
        self._trim(ts_ms, force=len(self.times) == self._values.shape[0])
        if len(self.times) == self._values.shape[0]:
            self._resize(self._values.shape[1], self._columns_wanted())
        self.times.append(ts_ms)
        return len(self.times) - 1

    def nbytes(self) -> int:
        """The bytes its arrays hold, the `reach` store's included."""
        arrays = (self._group_of, self._values, self._last_valid, self._gappy, *self._resets)
        return sum(a.nbytes for a in arrays) + (self._reach[1].nbytes() if self._reach is not None else 0)

    def _columns_wanted(self) -> int:
        """Twice the columns, or what the retention holds at the scrapes' average step and one
        batch to trim, if fewer and more than now: doubled, a baseline of 261 columns kept 512."""
        n = len(self.times)
        wanted = max(32, 2 * n)
        if n >= 2 and self.times[-1] > self.times[0]:
            step = (self.times[-1] - self.times[0]) / (n - 1)
            fits = math.ceil(to_ms(self.retention) / step) + 2 + _TRIM_BATCH
            if fits > n:
                wanted = min(wanted, max(32, fits))
        return wanted

    def _trim(self, now_ms: int, force: bool) -> None:
        cut = bisect_left(self.times, now_ms - to_ms(self.retention))
        if cut == 0 or (cut < _TRIM_BATCH and not force):
            return
        del self.times[:cut]
        kept = len(self.times)
        self._values[:kept] = self._values[cut : cut + kept]
        self._values[kept:] = math.nan
        if kept and self._resets[0].size:
            later = self._resets[1] > self.times[0]  # no window reads a reset at or before its first column
            self._resets = (self._resets[0][later], self._resets[1][later], self._resets[2][later])
        self._drop_empty_rows(kept)

    def _drop_empty_rows(self, kept: int) -> None:
        n = len(self.keys)
        if n == 0:
            return
        if kept == 0:
            self.clear()  # every row aged out: nothing is left to keep
            return
        valid = ~np.isnan(self._values[:kept, :n])
        # A row's gap counts only after its first sample: one that ended up before it no longer does.
        first_valid = np.argmax(valid, axis=0)
        self._gappy[:n] &= np.count_nonzero(valid, axis=0) < kept - first_valid
        alive = valid.any(axis=0)
        if alive.all():
            return
        order = np.nonzero(alive)[0]
        self._values[:, : len(order)] = self._values[:, order]
        self._values[:, len(order) :] = math.nan
        for array, empty in ((self._last_valid, math.nan), (self._group_of, 0), (self._gappy, False)):
            array[: len(order)] = array[order]
            array[len(order) :] = empty
        new_index = {int(old): new for new, old in enumerate(order)}
        self.keys = {key: new_index[row] for key, row in self.keys.items() if row in new_index}
        moved = np.full(n, -1, dtype=np.int64)
        moved[order] = np.arange(len(order))
        reset_rows = moved[self._resets[0]]
        kept_resets = reset_rows >= 0
        self._resets = (reset_rows[kept_resets], self._resets[1][kept_resets], self._resets[2][kept_resets])
        self._family_rows.clear()

    def _resize(self, rows: int, columns: int) -> None:
        """New arrays of `rows` by `columns`, what fits of the old ones copied (only spare rows and
        columns are ever dropped)."""
        kept_columns, kept_rows = min(columns, self._values.shape[0]), min(rows, self._values.shape[1])
        values = np.full((columns, rows), math.nan)
        values[:kept_columns, :kept_rows] = self._values[:kept_columns, :kept_rows]
        self._values = values
        last_valid = np.full(rows, math.nan)
        last_valid[:kept_rows] = self._last_valid[:kept_rows]
        group_of = np.zeros(rows, dtype=np.int64)
        group_of[:kept_rows] = self._group_of[:kept_rows]
        gappy = np.zeros(rows, dtype=bool)
        gappy[:kept_rows] = self._gappy[:kept_rows]
        self._last_valid, self._group_of, self._gappy = last_valid, group_of, gappy


def _extrapolate(
    increase: Floats, t0: Floats | float, t1: Floats | float, v0: Floats, count: Ints | int, seconds: float
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


# The keys and groups every store of this process has made, each kept once: the replicas of one
# model write the same series (the same names and labels on every page), and a target's two
# stores share theirs. Kept per target, they were tuples every target paid for again (docs/performance.md).
_shared_key: Interned[SeriesKey] = Interned(1 << 18)
_shared_group: Interned[GroupKey] = Interned(1 << 18)


def to_ms(seconds: float) -> int:
    return round(seconds * 1000)


def _families(snap: Snapshot) -> Iterator[tuple[Family, Mapping[Any, float], KeyOf]]:
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
