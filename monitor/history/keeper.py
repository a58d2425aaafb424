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
from monitor.rulefiles.promql import Labels, Matcher, Sample, Track, parse, points_between
from monitor.rulefiles.rules import RuleSet


@dataclass(frozen=True)
class Wanted:
    """Series the history keeps: one metric name and label matchers (as a rule's selector), and
    how many days back memory holds them: None, the trend rules' reach (a rule's series); a
    number (the trend causes' series: a week and a day); 0, only the day being filled (the
    `history.series` others, read from the store when asked for)."""

    name: str
    matchers: tuple[Matcher, ...] = ()
    days: int | None = None

    def matches(self, labels: Labels) -> bool:
        return all(m.matches(labels) for m in self.matchers)


@dataclass
class _Series:
    labels: dict[str, str]  # with __name__
    keep_days: int  # days before today held in memory (0: the current day only)
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
        self._open_end: float | None = None  # the bucket the last tick fell in (its series are open)
        self._by_labels: dict[int, tuple[Labels, _Series | None]] = {}  # the last tick's label dicts
        self.points = 0  # points closed since start (a new one: the trend rules have something new)

    @property
    def names(self) -> set[str]:
        return set(self.wanted)

    @property
    def memory_names(self) -> set[str]:
        """The metrics of which some series are held in memory for days (what a restart reads back)."""
        return {name for name, ws in self.wanted.items() if any(w.days is None or w.days > 0 for w in ws)}

    @property
    def longest_days(self) -> int:
        """The most days back any series is held in memory (what a restart reads from the store)."""
        return max((self.memory_days if w.days is None else w.days for ws in self.wanted.values() for w in ws),
                   default=self.memory_days)

    # --- recording ----------------------------------------------------------------------------

    def observe(self, samples: Mapping[str, Sequence[Sample]], ts: float) -> int:
        """Take one tick's samples at `ts`; returns how many points closed (buckets ended before it).

        A reader of page after page hands the same label dicts every tick: which series a label
        dict is (or that it is none the history keeps) is looked up by its identity, and worked
        out (matchers, the series' key) only for a label dict not seen at the last tick."""
        end = math.ceil(ts / STEP) * STEP
        closed = self._close_before(end) if end != self._open_end else 0
        self._open_end = end
        known, self._by_labels = self._by_labels, {}
        for name, wanted in self.wanted.items():
            for labels, value in samples.get(name, ()):
                kept = known.get(id(labels))
                if kept is None or kept[0] is not labels:
                    matched = [w for w in wanted if w.matches(labels)]
                    kept = (labels, self._get(name, labels, self._keep(matched)) if matched else None)
                self._by_labels[id(labels)] = kept  # holding `labels` keeps its id its own
                series = kept[1]
                if series is None or math.isnan(value):
                    continue
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

    def _keep(self, matched: Sequence[Wanted]) -> int:
        return max(self.memory_days if w.days is None else w.days for w in matched)

    def _get(self, name: str, labels: Labels, keep_days: int) -> _Series:
        key = series_key(name, labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series({**labels, "__name__": name}, keep_days)
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
            oldest = today - series.keep_days
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
            if not matched or stored.day < today - self._keep(matched):
                continue
            series = self._get(stored.name, stored.labels, self._keep(matched))
            here = series.days.get(stored.day)
            series.days[stored.day] = stored.points.copy() if here is None else np.where(
                np.isnan(here), stored.points, here)
            series.track = None
            loaded += 1
        return loaded

    # --- reading (the History protocol) ---------------------------------------------------------

    def tracks(self, name: str) -> Sequence[Track]:
        """The series of `name` held in memory for days (a trend rule's or cause's), with their points."""
        out = []
        for key in self._by_name.get(name, ()):
            series = self._series[key]
            if not series.keep_days:
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


# What a trend alert's probable cause compares week over week (monitor/alerting/causes.py, layer
# "trend"): the load, the engine's cache, the GPUs' power and clocks, and which engine served. A week
# and a day in memory.
CAUSE_SERIES = (
    ('inference_requests_per_second', 'window', '5m'),
    ('inference_kv_cache_usage_ratio', None, None),
    ('inference_preemptions_per_second', 'window', '5m'),
    ('inference_prefix_cache_hit_ratio', 'window', '5m'),
    ('inference_gpu_power_watts', None, None),
    ('inference_gpu_sm_clock_hertz', None, None),
    ('inference_target_info', None, None),  # the engine behind the target: a step at its change (changes.py)
)
CAUSE_DAYS = 9
SPARKLINE_DAYS = 31
WEEK = 7 * DAY
RECENT = 6 * 3600.0  # the hours a week-over-week fact compares (as the latency creep rules)


def wanted_of(ruleset: RuleSet | None, series: Iterable[str]) -> list[Wanted]:
    """What the history keeps: every selector of the trend rules, the trend causes' series, and the
    configured selectors."""
    wanted: list[Wanted] = [Wanted(name, (Matcher(label, "=", value),) if label and value else (), days=CAUSE_DAYS)
                            for name, label, value in CAUSE_SERIES]
    # the overview's week-over-week column and its 30-day sparkline (monitor/history/summary.py)
    wanted.append(Wanted("inference_ttft_seconds", (Matcher("quantile", "=", "0.99"), Matcher("window", "=", "5m")),
                         days=SPARKLINE_DAYS))
    for rule in ruleset.rules if ruleset is not None else ():
        if rule.trend:
            wanted.extend(Wanted(selector.name, selector.matchers) for selector in rule.expr.selectors)
    for text in series:
        node = parse(text).selector
        if node is None:
            raise ValueError(f"{text!r} is not a selector")
        wanted.append(Wanted(node.name, node.matchers, days=0))
    return list(dict.fromkeys(wanted))


def memory_days(ruleset: RuleSet | None) -> int:
    """Days in memory: the trend rules' longest reach and a day, and at least 15 (two weeks back)."""
    reach = max((rule.expr.longest_reach for rule in ruleset.rules if rule.trend),
                default=0.0) if ruleset is not None else 0.0
    return max(15, math.ceil(reach / DAY) + 1)


def build_keeper(settings: HistorySettings, ruleset: RuleSet | None) -> HistoryKeeper | None:
    if not settings.enabled:
        return None
    return HistoryKeeper(wanted_of(ruleset, settings.series), memory_days(ruleset))


def week_over_week(history: HistoryKeeper, name: str, match: Mapping[str, str], at: float,
                   recent: float = RECENT, back: float = WEEK) -> float | None:
    """The mean of `name`'s points over the last `recent` seconds (over every series whose labels
    hold `match`) against the same hours a week (`back`) before; None without points in both.
    Then at 0 and now above: +inf (it appeared); 0 and 0: 1."""
    now_values, then_values = [], []
    for track in history.tracks(name):
        if any(track.labels.get(k) != v for k, v in match.items()):
            continue
        now_values.append(points_between(track, at - recent, at)[1])
        then_values.append(points_between(track, at - back - recent, at - back)[1])
    now = np.concatenate(now_values) if now_values else np.empty(0)
    then = np.concatenate(then_values) if then_values else np.empty(0)
    if not len(now) or not len(then):
        return None
    base, current = float(np.mean(then)), float(np.mean(now))
    if base == 0:
        return 1.0 if current == 0 else math.inf
    return current / base
