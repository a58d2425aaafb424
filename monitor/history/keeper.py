"""The long-horizon history in memory: the series a trend reads, as 5-minute points.

Each evaluation tick hands the keeper the samples it read (the monitor's own /metrics, as a
Prometheus scrape sees them); the keeper keeps those of the series it is asked for (the trend
rules' selectors and the configured ones): per series, the mean of the values of each 5-minute
bucket (t - 300 s, t] becomes the point at t once a later tick arrives. In memory it holds the
days the trend rules reach back to (the longest range plus offset, plus a day); the store holds
the retention (5 weeks by default), and a restart loads the memory's share back.

It is the `History` the trend expressions (`rulefiles.promql`) are evaluated over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from monitor.config import HistorySettings
from monitor.history.store import DAY, SLOTS, STEP, StoredDay, empty_day, series_key
from monitor.rulefiles.expr import Labels, Matcher, Sample, Selector, parse
from monitor.rulefiles.promql import Track, TrendExpr
from monitor.rulefiles.rules import RuleSet


@dataclass(frozen=True)
class Wanted:
    """Series the history keeps: one metric name and label matchers (as a rule's selector).
    A trend rule's series are held in memory for the rules' reach; the others (`history.series`)
    only for the day being filled: they are read from the store when asked for."""

    name: str
    matchers: tuple[Matcher, ...] = ()
    in_memory: bool = True

    def matches(self, labels: Labels) -> bool:
        return all(m.matches(labels) for m in self.matchers)


@dataclass
class _Series:
    labels: dict[str, str]  # with __name__
    in_memory: bool  # held for the trend rules' reach (else the current day only)
    days: dict[int, np.ndarray] = field(default_factory=dict)  # UTC day -> SLOTS points (NaN: none)
    bucket_end: float | None = None  # the open bucket
    total: float = 0.0
    count: int = 0
    track: Track | None = None  # the points as one track, until a point is added


class HistoryKeeper:
    def __init__(self, wanted: Iterable[Wanted], memory_days: int) -> None:
        self.wanted: dict[str, list[Wanted]] = {}
        for item in wanted:
            self.wanted.setdefault(item.name, []).append(item)
        self.memory_days = max(1, memory_days)
        self._series: dict[str, _Series] = {}
        self._by_name: dict[str, list[str]] = {}
        self._dirty: set[tuple[str, int]] = set()
        self.points = 0  # points closed since start (a new one: the trend rules have something new)

    @property
    def names(self) -> set[str]:
        return set(self.wanted)

    # --- recording ----------------------------------------------------------------------------

    def observe(self, samples: Mapping[str, Sequence[Sample]], ts: float) -> int:
        """Take one tick's samples at `ts`; returns how many points closed (buckets ended before it)."""
        end = math.ceil(ts / STEP) * STEP
        closed = self._close_before(end)
        for name, wanted in self.wanted.items():
            for labels, value in samples.get(name, ()):
                if math.isnan(value):
                    continue
                matched = [w for w in wanted if w.matches(labels)]
                if not matched:
                    continue
                series = self._get(name, labels, any(w.in_memory for w in matched))
                if series.bucket_end != end:
                    series.bucket_end, series.total, series.count = end, 0.0, 0
                series.total += value
                series.count += 1
        return closed

    def _close_before(self, end: float) -> int:
        closed = 0
        for key, series in self._series.items():
            if series.bucket_end is not None and series.bucket_end < end and series.count:
                self._put(key, series, series.bucket_end, series.total / series.count)
                series.bucket_end, series.count = None, 0
                closed += 1
        if closed:
            self.points += closed
            self._prune(end)
        return closed

    def _get(self, name: str, labels: Labels, in_memory: bool) -> _Series:
        key = series_key(name, labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series({**labels, "__name__": name}, in_memory)
            self._by_name.setdefault(name, []).append(key)
        return series

    def _put(self, key: str, series: _Series, at: float, value: float) -> None:
        day, slot = divmod(int(at) // STEP, SLOTS)
        points = series.days.get(day)
        if points is None:
            points = series.days[day] = empty_day()
        points[slot] = value
        series.track = None
        self._dirty.add((key, day))

    def _prune(self, now: float) -> None:
        today = int(now // DAY)
        for series in self._series.values():
            oldest = today - self.memory_days if series.in_memory else today
            for day in [d for d in series.days if d < oldest]:
                del series.days[day]
                series.track = None

    # --- the store's side -----------------------------------------------------------------------

    def take_dirty(self) -> list[StoredDay]:
        """The days that changed since the last call, to be written."""
        out = []
        for key, day in sorted(self._dirty, key=lambda item: item[1]):
            series = self._series[key]
            if day in series.days:
                labels = {k: v for k, v in series.labels.items() if k != "__name__"}
                out.append(StoredDay(series.labels["__name__"], labels, day, series.days[day].copy()))
        self._dirty.clear()
        return out

    def load(self, days: Iterable[StoredDay], now: float) -> int:
        """Put stored (or imported) days in memory: a point already here wins over a stored one."""
        today = int(now // DAY)
        loaded = 0
        for stored in days:
            labels = {**stored.labels, "__name__": stored.name}
            matched = [w for w in self.wanted.get(stored.name, ()) if w.matches(labels)]
            in_memory = any(w.in_memory for w in matched)
            if not matched or stored.day < (today - self.memory_days if in_memory else today):
                continue
            series = self._get(stored.name, stored.labels, in_memory)
            here = series.days.get(stored.day)
            series.days[stored.day] = stored.points.copy() if here is None else np.where(
                np.isnan(here), stored.points, here)
            series.track = None
            loaded += 1
        return loaded

    # --- reading (the History protocol) ---------------------------------------------------------

    def tracks(self, name: str) -> Sequence[Track]:
        """The series of `name` held in memory (a trend rule's), with their points."""
        out = []
        for key in self._by_name.get(name, ()):
            series = self._series[key]
            if not series.in_memory:
                continue
            if series.track is None:
                series.track = _track(series)
            if len(series.track.ts):
                out.append(series.track)
        return out

    def memory_bytes(self) -> int:
        return sum(points.nbytes for series in self._series.values() for points in series.days.values())


def _track(series: _Series) -> Track:
    times, values = [], []
    for day in sorted(series.days):
        points = series.days[day]
        kept = ~np.isnan(points)
        times.append((day * SLOTS + np.nonzero(kept)[0]) * float(STEP))
        values.append(points[kept])
    if not times:
        return Track(series.labels, np.empty(0), np.empty(0))
    return Track(series.labels, np.concatenate(times), np.concatenate(values))


def first_day(now: float, days: float) -> int:
    """The first UTC day (days since 1970-01-01) of the `days` days up to `now`."""
    return int(now // DAY) - math.ceil(days)


def wanted_of(ruleset: RuleSet | None, series: Iterable[str]) -> list[Wanted]:
    """What the history keeps: every selector of the trend rules, and the configured selectors."""
    wanted: list[Wanted] = []
    for rule in ruleset.rules if ruleset is not None else ():
        if isinstance(rule.expr, TrendExpr):
            wanted.extend(Wanted(name, matchers) for name, matchers in rule.expr.selectors)
    for text in series:
        node = parse(text)
        if not isinstance(node, Selector):
            raise ValueError(f"{text!r} is not a selector")
        wanted.append(Wanted(node.name, node.matchers, in_memory=False))
    return list(dict.fromkeys(wanted))


def memory_days(ruleset: RuleSet | None) -> int:
    """Days in memory: the trend rules' longest reach and a day, and at least 15 (two weeks back)."""
    reach = max((rule.expr.longest_reach for rule in ruleset.rules if isinstance(rule.expr, TrendExpr)),
                default=0.0) if ruleset is not None else 0.0
    return max(15, math.ceil(reach / DAY) + 1)


def build_keeper(settings: HistorySettings, ruleset: RuleSet | None) -> HistoryKeeper | None:
    if not settings.enabled:
        return None
    return HistoryKeeper(wanted_of(ruleset, settings.series), memory_days(ruleset))
