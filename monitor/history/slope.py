"""How fast a creep grows, and for how long: the trend rules' own number, shown.

The growth a day is the creep rule's value: `Builder.per_day()` of `rulefiles/trends.py`, evaluated
as an `Expr` over the history where the creep rule's condition holds (`Builder.creep()`), so
the overview, `infermon status` and the digest say what the rule says, from the same PromQL (no
second formula here). The crossing time is the forecast rule's `days_to_cross`.

How long it has grown is read from the same week-over-week ratio (`Builder.wow()`), a 12-hour
step at a time further back: for a creep that began A days ago the level is above the same
hours a week before for every offset below A and not past it, so the first offset where it is no
longer above (by `STILL_GROWING`) is the creep's age. A scan that reaches the start of the
history before that says "at least".

Only a quantity compared by ratios and worse when it rises has a growth a day as a fraction
(0.03: +3 %/day): the latencies, the error ratio, $/1M tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from monitor.history.store import DAY, SLOTS, STEP, StoredDay
from monitor.rulefiles.promql import History, HistoryAt, Track, Vector, parse
from monitor.rulefiles.trends import QUANTITIES, WEEK, Builder, Quantity

SCAN = 12 * 3600.0  # the age is read back in steps of this
STILL_GROWING = 1.005  # the week-over-week ratio above which the level still grew that week

Key = tuple[tuple[str, str], ...]  # a series' labels without __name__, sorted


@dataclass(frozen=True)
class Slope:
    per_day: float | None  # the growth a day as a fraction (0.03: +3 %/day); None: not creeping
    days: float | None  # how long it has grown (in 12-hour steps); None with per_day None
    at_least: bool  # the scan reached the start of the history: it has grown for longer than `days`
    now: float | None  # the level now (the mean over the quantity's window)
    crosses_in_days: float | None  # when the level, grown at per_day, crosses the threshold asked for


# --- the quantities ----------------------------------------------------------------------------

def quantity(key: str) -> Quantity:
    """The trend quantity named `key` ("TTFTP99")."""
    for q in QUANTITIES:
        if q.key == key:
            return q
    raise KeyError(key)


def of_metric(name: str) -> Quantity | None:
    """The trend quantity of the metric `name` with a growth a day as a fraction, if there is one."""
    for q in QUANTITIES:
        if q.selector.split("{", 1)[0] == name and _as_fraction(q):
            return q
    return None


def fleet(q: Quantity) -> Quantity:
    """`q` over each model's fleet-wide series (no `target` label), as the digest reads a model."""
    def fleet_wide(text: str) -> str:
        return text.replace('target!=""', 'target=""')

    return dataclasses.replace(q, selector=fleet_wide(q.selector), floor=q.floor and fleet_wide(q.floor))


def _as_fraction(q: Quantity) -> bool:
    return q.compare == "ratio" and q.direction == "up"


# --- the slopes --------------------------------------------------------------------------------

def slope_of(history: History, q: Quantity, match: Mapping[str, str], at: float,
             threshold: float | None = None) -> Slope | None:
    """The slope of the series of `q` whose labels hold `match` (of several, the fastest growing);
    None without such a series in the history. Only those series are read (one alert's context
    is not a pass over the fleet)."""
    (name,) = parse(Builder(q, "up").level()).metric_names
    chosen = [track for track in history.tracks(name) if _holds(_key(track.labels), match)]
    return pick(slopes(_Only(name, chosen), q, at, threshold), match)


class SlopeFields(TypedDict):
    """A slope in a row: the growth a day, how long it grew, and when it crosses the threshold shown."""

    per_day: float | None
    growing_days: float | None
    growing_at_least: bool
    crosses_in_days: float | None
    crosses: str | None


def row_fields(slope: Slope | None, threshold_shown: str) -> SlopeFields:
    """A slope as the overview's trend rows and the digest's JSON carry it: None and no crossing
    where the creep rule's condition does not hold (no "+0.0 %/day")."""
    if slope is None or slope.per_day is None:
        return {"per_day": None, "growing_days": None, "growing_at_least": False, "crosses_in_days": None,
                "crosses": None}
    crosses = slope.crosses_in_days
    return {"per_day": slope.per_day, "growing_days": slope.days, "growing_at_least": slope.at_least,
            "crosses_in_days": crosses, "crosses": (threshold_shown or None) if crosses is not None else None}


def pick(found: Mapping[Key, Slope], match: Mapping[str, str]) -> Slope | None:
    chosen = [slope for key, slope in found.items() if _holds(key, match)]
    return max(chosen, key=lambda s: -math.inf if s.per_day is None else s.per_day, default=None)


def slopes(history: History, q: Quantity, at: float, threshold: float | None = None,
           here: HistoryAt | None = None) -> dict[Key, Slope]:
    """Every series of `q` at `at`: its level, and where the creep rule's condition holds, its growth
    a day, for how long, and when it crosses `threshold` (if given and the level is below it).
    `here`: the history read at `at` the trend rules were just evaluated on (their levels are read
    again from its cache, not from the points)."""
    if not _as_fraction(q):
        raise ValueError(f"{q.key}: only a ratio that is worse when it rises has a growth a day as a fraction")
    b = Builder(q, "up")
    if here is None or here.history is not history or here.ts != at:
        here = HistoryAt(history, at)  # one instant: the expressions share their levels
    levels = _by_key(parse(b.level()).eval(here))
    growth = {key: factor - 1 for key, factor in _by_key(parse(f"{b.per_day()}\nand\n{b.creep()}").eval(here)).items()
              if math.isfinite(factor) and factor > 1}
    crossing = _by_key(parse(b.days_to_cross(threshold)).eval(here)) if threshold is not None and growth else {}
    ages = _ages(here, b, set(growth))
    out = {}
    for key, now in levels.items():
        per_day = growth.get(key)
        days, at_least = ages.get(key, (None, False))
        crosses = crossing.get(key) if per_day is not None else None
        if crosses is not None and not (math.isfinite(crosses) and crosses >= 0):
            crosses = None  # already above the threshold
        out[key] = Slope(per_day, days, at_least, now, crosses)
    return out


def _ages(here: HistoryAt, b: Builder, growing: set[Key]) -> dict[Key, tuple[float, bool]]:
    """How long each growing series has grown: (days, whether the history's start cut the scan).

    The ratio `SCAN` steps back is `wow(offset)` read at `at`, so a level is read once for the scan
    (the week before one step is the level of a step a week further back)."""
    if not growing:
        return {}
    (name,) = parse(b.wow()).metric_names
    candidates = {key: track for track in here.history.tracks(name)
                  if (key := _key(track.labels)) in growing and len(track.ts)}
    only = _Only(name, list(candidates.values()))
    scan = HistoryAt(only, here.ts)
    scan.cache = dict(here.cache)  # the levels read at `at` already (of every series: a superset is harmless)
    ages: dict[Key, tuple[float, bool]] = {}
    back = 0.0
    while candidates:
        back += SCAN
        oldest = here.ts - back - WEEK - b.q.window  # the first point the ratio `back` ago reads
        for key in [k for k, track in candidates.items() if track.ts[0] > oldest]:
            ages[key] = ((back - SCAN) / DAY, True)
            del candidates[key]
        only.found = list(candidates.values())
        ratios = _by_key(parse(b.wow(back)).eval(scan)) if candidates else {}
        for key in [k for k in candidates if not ratios.get(k, math.nan) > STILL_GROWING]:
            ages[key] = (back / DAY, False)
            del candidates[key]
    return ages


class _Only:
    """A history of a few tracks of one metric (the series still being scanned)."""

    def __init__(self, name: str, tracks: Sequence[Track]) -> None:
        self.name, self.found = name, tracks

    def tracks(self, name: str) -> Sequence[Track]:
        return self.found if name == self.name else ()


def _key(labels: Mapping[str, str]) -> Key:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def _by_key(vector: Vector) -> dict[Key, float]:
    return {_key(labels): value for labels, value in vector}


def _holds(key: Key, match: Mapping[str, str]) -> bool:
    labels = dict(key)
    return all(labels.get(k, "") == v for k, v in match.items())  # a label not there is "", as in PromQL


# --- a history of stored days (the digest's) ---------------------------------------------------

class StoredHistory:
    """Stored days as a `History`: a track per series, its days in order."""

    def __init__(self, days: Iterable[StoredDay]) -> None:
        series: dict[tuple[str, Key], list[StoredDay]] = {}
        for stored in days:
            series.setdefault((stored.name, _key(stored.labels)), []).append(stored)
        self.by_name: dict[str, list[Track]] = {}
        for (name, key), found in series.items():
            self.by_name.setdefault(name, []).append(_track(name, dict(key), found))

    def tracks(self, name: str) -> Sequence[Track]:
        return self.by_name.get(name, [])


def _track(name: str, labels: dict[str, str], days: list[StoredDay]) -> Track:
    times, values = [], []
    for stored in sorted(days, key=lambda d: d.day):
        kept = ~np.isnan(stored.points)
        times.append((stored.day * SLOTS + np.nonzero(kept)[0]) * float(STEP))
        values.append(stored.points[kept])
    return Track({**labels, "__name__": name}, np.concatenate(times), np.concatenate(values))
