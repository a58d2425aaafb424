"""What a creep is, once: the definition `alerts/trend.yml` is generated from.

Every trend quantity (a latency P99, the error ratio, $/1M tokens, the judge score, the output
length) is a row of `QUANTITIES`; its rules are written out from the same few building blocks, so
"what is a creep" reads here and nowhere else. The rule file stays plain PromQL (ranges, `offset`,
arithmetic, `ln`): a Prometheus that already holds the weeks evaluates it at once, and the embedded
evaluator reads the same file.

The building blocks, for a quantity's level ``L(o) = avg_over_time(x[window] offset o)``:

- ``wow(o)  = L(o) / L(o + 1w)``: the level against the same hours a week before (the daily and the
  weekly rhythm cancel); for a steady creep of g a day it is (1+g)^7, whatever the creep's age.
- ``two(o)  = L(o) / L(o + 2w)``: against two weeks before.
- **growing**: ``two(o) / two(o + half)`` is the growth over `half` with the rhythm cancelled, exact
  for a creep younger than two weeks; read over two halves that do not overlap (so a one-time step
  lies in one of them at most), the newer half growing at least a quarter as much as the older (a
  creep grows evenly, a step in one half), and twice, `reading` apart (so a step astride a window
  edge does not count either).
- **sustained**: ``wow(0)`` and ``wow(1w)`` both up (the level grew in each of the last two weeks,
  which a step cannot do) and ``wow(0)`` not falling over the last `half`: a creep older than a week.
- **creep**  = above both earlier weeks, and growing or sustained: a creep stays a creep for as long
  as it lasts; it ends within about a `half` of when it stops.
- **step**   = above both earlier weeks, already as high a `half` ago, flat since (``two`` unmoved),
  the week before it flat (``wow(1w)`` not up), and not growing: a change within the week, flat on
  both sides.
- **growth a day** = the larger of ``wow(0)^(1/7)`` (a creep older than a week) and the growing
  term's rate (a young one); the **forecast** is when the level, grown at that rate, crosses the
  paging threshold: ``ln(threshold / L(0)) / ln(growth)`` days.

A quantity that falls when it gets worse (the judge score) is compared the other way round, and a
score compares by differences (points) instead of ratios. `python -m monitor.dashboards` writes
the file; a test checks the committed one is current.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

DAY = 86400
WEEK = 7 * DAY


def duration(seconds: float) -> str:
    """A Prometheus duration: 1w, 8d12h, 3h."""
    seconds = int(seconds)
    if seconds % WEEK == 0 and seconds:
        return f"{seconds // WEEK}w"
    days, rest = divmod(seconds, DAY)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    return "".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n) or "0s"


@dataclass(frozen=True)
class Thresholds:
    """A quantity's numbers, in its comparison's unit (a ratio: 1.05 is +5 %; a difference: points)."""

    above_1w: float  # the level against a week before (a creep)
    above_2w: float  # ... and against two weeks before (a creep and a step: one odd week is not enough)
    grow: float  # the growth over each half (the young test)
    sustain: float  # the week-over-week growth a week ago too (the sustained test)
    falling: float  # wow(0) against wow(half) below this: the creep stopped
    step: float  # a step: above both weeks and a half ago by this much
    flat: float  # a step's level moved less than this over the last half (either way)


@dataclass(frozen=True)
class Forecast:
    alert: str
    threshold: float  # in the quantity's unit
    shown: str  # "1 s"
    rule: str  # the rule that pages there


@dataclass(frozen=True)
class Quantity:
    key: str  # names the rules: TTFTP99 -> TTFTP99Creep, TTFTP99Step, TTFTP99CreepForecast
    what: str  # "P99 TTFT"
    selector: str
    window: int  # seconds of each level
    half: int  # seconds of each growth half
    reading: int  # the second reading, this much earlier: at least `window`, so that a step astride a
    # half's edge in one reading is wholly inside a half in the other
    thresholds: Thresholds
    layer: str
    subject: str  # "{{ $labels.model }} on {{ $labels.target }}"
    where: str  # "on {{ $labels.target }}" (the summary's end)
    creep: str  # the creep rule's name
    step: str | None = None
    forecast: Forecast | None = None
    compare: str = "ratio"  # or "difference"
    direction: str = "up"  # "down": worse when it falls; "both": either way (a drift)
    floor: str | None = None  # an extra condition on the level (the error ratio's 0.1 %)
    runbook: str = "docs/runbooks/trend.md"
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def days(self) -> float:
        return self.half / DAY


class Builder:
    """The PromQL of one quantity, in one direction."""

    def __init__(self, q: Quantity, direction: str) -> None:
        self.q, self.down = q, direction == "down"
        self.ratio = q.compare == "ratio"

    def level(self, offset: float = 0.0) -> str:
        at = f" offset {duration(offset)}" if offset else ""
        return f"avg_over_time({self.q.selector}[{duration(self.q.window)}]{at})"

    def change(self, now: float, before: float) -> str:
        """How much worse the level at `now` is than at `before` (offsets): a ratio or points."""
        a, b = self.level(now), self.level(before)
        if self.down:
            a, b = b, a
        return f"({a} / {b})" if self.ratio else f"({a} - {b})"

    def combine(self, a: str, b: str) -> str:
        return f"({a} / {b})" if self.ratio else f"({a} - {b})"

    def wow(self, o: float = 0.0) -> str:
        return self.change(o, o + WEEK)

    def two(self, o: float = 0.0) -> str:
        return self.change(o, o + 2 * WEEK)

    def grew(self, o: float) -> str:
        """The growth over the half ending at offset `o`, the rhythm cancelled."""
        return self.combine(self.two(o), self.two(o + self.q.half))

    def above(self) -> list[str]:
        t = self.q.thresholds
        return [f"{self.wow()} > {t.above_1w:g}", f"{self.two()} > {t.above_2w:g}"]

    def growing(self) -> list[str]:
        q, t = self.q, self.q.thresholds
        offsets = (0, q.half, q.reading, q.reading + q.half)
        grown = [f"{self.grew(o)} > {t.grow:g}" for o in offsets]
        # Even: the newer half grew at least a quarter as much as the older one (in log terms). A step
        # grows one half only, so where noise lifts the other past `grow` (its reading astride the
        # step) it is still no creep; and a creep that stopped stops being one within its newer half.
        even = [f"{self.grew(o)} > {self.grew(o + q.half)} ^ 0.25" if self.ratio
                else f"{self.grew(o)} > {self.grew(o + q.half)} / 4" for o in (0, q.reading)]
        return grown + even

    def sustained(self) -> list[str]:
        t, low = self.q.thresholds, self.q.thresholds.falling
        return [f"{self.wow()} > {t.above_1w:g}", f"{self.wow(WEEK)} > {t.sustain:g}",
                f"{self.combine(self.wow(), self.wow(self.q.half))} > {low:g}"]

    def creep(self) -> str:
        floor = [self.q.floor] if self.q.floor else []
        return _and(floor + self.above() + [f"({_or([_and(self.growing()), _and(self.sustained())])})"])

    def per_day(self) -> str:
        """The growth a day: a factor (ratio) or points (difference)."""
        q = self.q
        if self.ratio:
            weekly, recent = f"{self.wow()} ^ (1 / 7)", f"{self.grew(0)} ^ (1 / {q.days:g})"
        else:
            weekly, recent = f"{self.wow()} / 7", f"{self.grew(0)} / {q.days:g}"
        return f"(({weekly}) > ({recent}) or ({recent}))"

    def per_day_shown(self) -> str:
        """The growth a day as the alert's value: percent a day (ratio) or points a day."""
        return f"({self.per_day()} - 1) * 100" if self.ratio else self.per_day()

    def step(self) -> str:
        t = self.q.thresholds
        lo, hi = (1 / t.flat, t.flat) if self.ratio else (-t.flat, t.flat)
        return _and([f"{self.wow()} > {t.step:g}", f"{self.two()} > {t.step:g}",
                     f"{self.wow(self.q.half)} > {t.step:g}",
                     f"{self.grew(0)} < {hi:g}", f"{self.grew(0)} > {lo:.6g}",
                     f"{self.wow(WEEK)} < {t.sustain:g}"]) + f"\nunless\n({_and(self.growing())})"

    def days_to_cross(self, threshold: float) -> str:
        return f"ln({threshold:g} / {self.level()}) / ln{self.per_day()}"


def _and(parts: Iterable[str]) -> str:
    return "\nand\n".join(parts)


def _or(parts: Iterable[str]) -> str:
    return "\nor\n".join(f"({p})" for p in parts)


# --- the quantities --------------------------------------------------------------------------

LATENCY = Thresholds(above_1w=1.05, above_2w=1.08, grow=1.008, sustain=1.03, falling=0.985, step=1.08, flat=1.015)
PER_DAY = Thresholds(above_1w=1.05, above_2w=1.10, grow=1.01, sustain=1.03, falling=0.99, step=1.15, flat=1.03)
ERRORS = Thresholds(above_1w=1.3, above_2w=1.5, grow=1.05, sustain=1.15, falling=0.95, step=2.0, flat=1.2)
SCORE = Thresholds(above_1w=0.15, above_2w=0.3, grow=0.03, sustain=0.1, falling=-0.05, step=0.3, flat=0.1)
LENGTH = Thresholds(above_1w=1.1, above_2w=1.3, grow=1.02, sustain=1.05, falling=0.98, step=1.3, flat=1.05)

_TARGET = "{{ $labels.model }} on {{ $labels.target }}"
_ON_TARGET = "on {{ $labels.target }}"


def _latency(key: str, what: str, metric: str, creep: str, step: str, forecast: Forecast | None) -> Quantity:
    return Quantity(key, what, f'{metric}{{quantile="0.99",window="5m",target!=""}}', window=6 * 3600,
                    half=36 * 3600, reading=12 * 3600, thresholds=LATENCY, layer="service", subject=_TARGET,
                    where=_ON_TARGET, creep=creep, step=step, forecast=forecast)


QUANTITIES: tuple[Quantity, ...] = (
    _latency("TTFTP99", "P99 TTFT", "inference_ttft_seconds", "TTFTP99Creep", "TTFTP99Step",
             Forecast("TTFTP99CreepForecast", 1.0, "1 s", "TTFTP99High")),
    _latency("TPOTP99", "P99 TPOT", "inference_tpot_seconds", "TPOTP99Creep", "TPOTP99Step",
             Forecast("TPOTP99CreepForecast", 0.05, "50 ms", "the real-time TPOT objective")),
    _latency("E2ELatencyP99", "P99 end-to-end latency", "inference_e2e_latency_seconds", "E2ELatencyP99Creep",
             "E2ELatencyP99Step", None),
    Quantity("ErrorRatio", "the error ratio", 'inference_request_error_ratio{window="5m",target!=""}', window=DAY,
             half=36 * 3600, reading=DAY, thresholds=ERRORS, layer="service", subject=_TARGET,
             where=_ON_TARGET, creep="ErrorRatioCreep", step="ErrorRatioStep",
             forecast=Forecast("ErrorRatioCreepForecast", 0.01, "1 %", "ErrorRateHigh"),
             floor='avg_over_time(inference_request_error_ratio{window="5m",target!=""}[1d]) > 0.001'),
    Quantity("CostPerToken", "$/1M generated tokens",
             'inference_cost_usd_per_million_tokens{window="5m",tokens="generated",model!=""}', window=DAY,
             half=36 * 3600, reading=DAY, thresholds=PER_DAY, layer="cost", subject="{{ $labels.model }}",
             where="of {{ $labels.model }}", creep="CostPerTokenCreep", step="CostPerTokenStep"),
    Quantity("QualityScore", "the mean judge score", "inference_quality_score_mean", window=3 * DAY, half=3 * DAY,
             reading=3 * DAY, thresholds=SCORE, layer="quality", subject="{{ $labels.model }}",
             where="of {{ $labels.model }}", creep="QualityScoreDeclineOverWeeks", compare="difference",
             direction="down"),
    Quantity("OutputLength", "the median output length", 'inference_quality_output_tokens{quantile="0.5"}',
             window=3 * DAY, half=3 * DAY, reading=3 * DAY, thresholds=LENGTH, layer="quality",
             subject="{{ $labels.model }}", where="of {{ $labels.model }}", creep="OutputLengthDriftOverWeeks",
             direction="both"),
)


# --- the rules, as text ----------------------------------------------------------------------

HEADER = """\
# Generated by `python -m monitor.dashboards` from monitor/rulefiles/trends.py (what a creep is,
# once): do not edit, regenerate (a test checks it is current).
#
# Trend alerts: what is slowly getting worse, a ticket rather than a page. Each level is compared
# with the same hours one and two weeks earlier, so a service that follows the day and the week
# raises nothing, and reads only the series the monitor exports: a Prometheus that already holds
# the weeks evaluates these rules at once (no recording rule to fill first). The embedded monitor
# evaluates the same expressions over the history it keeps (`history:` in the config;
# `infermon history import` seeds it from a Prometheus).
#
# A creep is a level above both earlier weeks that is still growing: over two halves of the last
# days that do not overlap (a young creep), or week over week in each of the last two weeks and
# not falling (a creep of any age). A step is a level above both weeks that has held since, with
# the week before it flat.
groups:
  - name: trend
    rules:
"""


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _rule(name: str, comment: str, expr: str, severity: str, q: Quantity, summary: str, description: str,
          keep: str | None = "6h") -> str:
    lines = [f"      - alert: {name}"]
    lines += [f"        # {line}" for line in textwrap.wrap(comment, 92)]
    lines.append("        expr: |-")
    lines += [f"          {line}" for line in expr.splitlines()]
    if keep:
        lines.append(f"        keep_firing_for: {keep}")
    pad = " " * 10
    lines += ["        labels:", f"{pad}severity: {severity}", f"{pad}layer: {q.layer}", f"{pad}kind: trend"]
    lines += ["        annotations:", f"{pad}summary: {_quote(summary)}", f"{pad}description: {_quote(description)}",
              f"{pad}runbook: {_quote(q.runbook + '#' + name.lower())}"]
    return "\n".join(lines) + "\n"


def _unit(q: Quantity) -> str:
    return "%/day" if q.compare == "ratio" else " points/day"


def _value(q: Quantity) -> str:
    return '{{ printf "%+.1f" $value }} %/day' if q.compare == "ratio" else '{{ printf "%.3f" $value }} points a day'


def _creep_rule(q: Quantity) -> str:
    directions = ("up", "down") if q.direction == "both" else (q.direction,)
    exprs = []
    for d in directions:
        b = Builder(q, d)
        shown = b.per_day_shown() if d == "up" or not b.ratio else f"({b.per_day()} ^ (-1) - 1) * 100"
        exprs.append(f"{shown}\nand\n{b.creep()}")
    expr = exprs[0] if len(exprs) == 1 else _or(exprs)
    verb = {"up": "creeping up", "down": "declining", "both": "drifting"}[q.direction]
    comment = (f"{q.what} above both earlier weeks and still growing: over the last {_days(q.half)} and the "
               f"{_days(q.half)} before (read twice, {_ago(q.reading).removesuffix(' ago')} apart), or week over "
               "week in each of the "
               "last two weeks and not falling. The value: its growth a day.")
    if q.direction == "down":
        comment = comment.replace("above", "below").replace("growing", "falling").replace(" up ", " down ")
    description = (f"{_cap(q.what)} of {q.subject} has {'fallen' if q.direction == 'down' else 'grown'} "
                   f"{_value(q)} at the same hours week over week, "
                   f"{'below' if q.direction == 'down' else 'above'} both of the last two weeks and still moving: "
                   "a creep, a ticket for as long as it lasts.")
    if q.direction == "both":
        description = (f"{_cap(q.what)} of {q.subject} drifts {_value(q)} (positive: longer) at the same days "
                       "week over week, past both of the last two weeks and still moving.")
    return _rule(q.creep, comment, expr, "warning", q, f"{_cap(q.what)} {verb} {q.where}", description)


def _forecast_rule(q: Quantity) -> str:
    assert q.forecast is not None
    b, f = Builder(q, "up"), q.forecast
    expr = f"{b.days_to_cross(f.threshold)} < 7 >= 0\nand\n{b.creep()}"
    comment = (f"A creep that pages: at its growth a day, {q.what} crosses {f.shown} ({f.rule}) within 7 days. "
               "The value: the days until then.")
    description = (f"At its growth of the last days, {q.what} of {q.subject} crosses {f.shown} ({f.rule}) in "
                   '{{ printf "%.1f" $value }} days.')
    return _rule(f.alert, comment, expr, "critical", q, f"{_cap(q.what)} creeping towards {f.shown} {q.where}",
                 description)


def _step_rule(q: Quantity) -> str:
    assert q.step is not None
    b = Builder(q, "up")
    comment = (f"A step: {q.what} above both earlier weeks, already as high {_ago(q.half)} and flat "
               "since, the week before it flat, and not growing (a deploy, a new engine version, a new traffic "
               "mix). The value: the level against a week before.")
    description = (f"{_cap(q.what)} of {q.subject} is {{{{ $value | humanizePercentage }}}} of the same hours a "
                   f"week ago and above two weeks ago; it has held that level for the last {_days(q.half)}, and the "
                   "week before it was flat: a step, not a creep.")
    return _rule(q.step, comment, f"{b.wow()}\nand\n{b.step()}", "warning", q,
                 f"{_cap(q.what)} stepped up {q.where}", description)


def _days(seconds: float) -> str:
    """A span after "the last": "day and a half", "3 days"."""
    days = seconds / DAY
    named = {0.5: "12 hours", 1.0: "day", 1.5: "day and a half"}
    return named.get(days, f"{days:g} days")


def _ago(seconds: float) -> str:
    span = _days(seconds)
    return f"{'a ' if span.startswith('day') else ''}{span} ago"


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def rules_text() -> str:
    """The text of alerts/trend.yml."""
    out = [HEADER]
    for q in QUANTITIES:
        out.append(_creep_rule(q))
        if q.forecast is not None:
            out.append(_forecast_rule(q))
        if q.step is not None:
            out.append(_step_rule(q))
    return "".join(out)


def main() -> None:
    print(rules_text(), end="")


if __name__ == "__main__":
    main()
