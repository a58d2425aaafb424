"""The trend expressions give the real Prometheus' numbers on the same three weeks of points.

Three weeks of 5-minute points (seasonal, creeping, stepped series of two metrics) go into a real
`prometheus` (as TSDB blocks from `promtool tsdb create-blocks-from openmetrics`) and into the
monitor's history; every expression below, queried at instants off the 5-minute grid, must give
the same series with the same values to 1e-9, and so must every shipped trend rule reading them.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from monitor.history.keeper import HistoryKeeper, Wanted
from monitor.rulefiles.promql import HistoryAt, TrendError, parse
from monitor.rulefiles.rules import AlertRule, load_rules
from monitor.rulefiles.trends import QUANTITIES, Builder
from tests.conftest import require_binary
from tests.history.worlds import DAY, WEEK, World, creeping, openmetrics, seasonal, stepped, stored_days
from tests.support.promserver import PrometheusServer

END = 1_780_000_000.0  # a Thursday in 2026, 18:26:40 UTC
START = END - 3 * WEEK
TTFT = "inference_ttft_seconds"
TPOT = "inference_tpot_seconds"


def labels(target: str, model: str, quantile: str = "0.99") -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", quantile), ("target", target), ("window", "5m"))


# Young creeps (a: 4 and 3 %/day for the last 3 and 5 days; d: 8 %/day for 4 days, fast enough to
# cross 1 s and 50 ms within the week), an old one (e: 2 %/day since the first day, a creep older
# than a week), a step (c: +30 % 4 days before the end), and the seasonal series they grow from.
FAST_TTFT = creeping(seasonal(0.5), END - 4 * DAY, 0.08)
FAST_TPOT = creeping(seasonal(0.03, 0.1), END - 4 * DAY, 0.08)
WORLDS = [
    World(TTFT, {
        labels("a", "creeping"): creeping(seasonal(0.3), END - 3 * DAY, 0.04),
        labels("b", "seasonal"): seasonal(0.3),
        labels("c", "stepped"): stepped(seasonal(0.3), END - 4 * DAY, 1.3),
        labels("d", "fast"): FAST_TTFT,
        labels("a", "creeping", "0.5"): seasonal(0.1),
    }),
    World(TPOT, {
        labels("a", "creeping"): creeping(seasonal(0.02, 0.1), END - 5 * DAY, 0.03),
        labels("b", "seasonal"): seasonal(0.02, 0.1),
        labels("d", "fast"): FAST_TPOT,
        labels("e", "old"): creeping(seasonal(0.02, 0.1), START + DAY, 0.02),
    }),
]
# What each shipped rule reading these metrics fires at END, by model.
EXPECTED_AT_END = {
    "TTFTP99Creep": {"creeping", "fast"}, "TTFTP99CreepForecast": {"fast"}, "TTFTP99Step": {"stepped"},
    "TPOTP99Creep": {"creeping", "fast", "old"}, "TPOTP99CreepForecast": {"fast"}, "TPOTP99Step": set(),
}

SEL = f'{TTFT}{{quantile="0.99"}}'
TTFT_TREND = Builder(next(q for q in QUANTITIES if q.key == "TTFTP99"), "up")
EXPRESSIONS = [
    f"avg_over_time({SEL}[6h])",
    f"avg_over_time({SEL}[6h] offset 1w)",
    f"sum_over_time({SEL}[1d]) / count_over_time({SEL}[1d])",
    f"quantile_over_time(0.9, {SEL}[1d])",
    f"quantile_over_time(0.5, {TTFT}[3d] offset 2d)",
    f"min_over_time({SEL}[2d]) > 0.16",
    f"max_over_time({SEL}[7h30m] offset 36h)",
    f"last_over_time({SEL}[1h])",
    f"stddev_over_time({SEL}[1d])",
    f"deriv({SEL}[3d])",
    f"predict_linear({SEL}[3d], 7 * 86400)",
    f"changes({SEL}[2h])",
    f"{SEL} offset 1d",
    f"-{SEL} + 1",
    f"abs(0.5 - {SEL})",
    f"clamp_min({SEL}, 0.35)",
    f"2 * {SEL} >= 0.5",
    f"avg_over_time({SEL}[6h]) / ignoring(quantile) avg_over_time({TPOT}[6h])",
    f"avg_over_time({SEL}[6h]) / on(target, model) avg_over_time({TPOT}[6h])",
    f"{SEL} > 0.25 and on(model) {TPOT} > 0.018",
    f"{SEL} > 0.5 or {TPOT}",
    f"{TTFT} unless ignoring(quantile) {TPOT}",
    f"ln(avg_over_time({SEL}[6h]))",
    f"exp(-2 * avg_over_time({SEL}[6h]))",
    f"ln(1 / avg_over_time({SEL}[6h])) / ln(avg_over_time({SEL}[6h] offset 1w))",
    f"exp(ln(avg_over_time({SEL}[6h] offset 1w)) / 7)",
    f"(avg_over_time({SEL}[6h]) / avg_over_time({SEL}[6h] offset 1w)) ^ (1 / 7)",
    # the larger of two, as the generated growth a day writes it
    f"(avg_over_time({SEL}[6h]) > avg_over_time({SEL}[6h] offset 1d)) or avg_over_time({SEL}[6h] offset 1d)",
    TTFT_TREND.per_day(),  # the TTFT growth a day, as the rules read it
    TTFT_TREND.days_to_cross(1.0),  # the days until the TTFT level, grown at that rate, crosses 1 s
]


def vector(result: Sequence[tuple[Mapping[str, str], float]]) -> dict[frozenset[tuple[str, str]], float]:
    out = {frozenset(labels.items()): value for labels, value in result}
    assert len(out) == len(result)
    return out


@pytest.fixture(scope="module")
def keeper() -> HistoryKeeper:
    keeper = HistoryKeeper([Wanted(TTFT), Wanted(TPOT)], memory_days=30)
    keeper.load(stored_days(WORLDS, START, END), END)
    return keeper


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory,
         keeper: HistoryKeeper) -> Iterator[tuple[PrometheusServer, HistoryKeeper]]:
    promtool = require_binary("promtool")
    source = Path(tmp_path_factory.mktemp("weeks")) / "weeks.om"
    source.write_text(openmetrics(WORLDS, START, END))
    prom = PrometheusServer({}, binary=require_binary("prometheus"), retention="60d")
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=24h", str(source), str(prom.dir / "data")],
                   check=True, capture_output=True)
    with prom:
        yield prom, keeper


@pytest.mark.prometheus
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_expression_equals_prometheus(both: tuple[PrometheusServer, HistoryKeeper], expr: str) -> None:
    prom, keeper = both
    parsed = parse(expr)
    assert END - 17.5 - parsed.longest_reach >= START  # each is read once at least
    for at in (END - 17.5, END - 2 * DAY - 3600 - 123.25, END - 6 * DAY - 61):
        theirs = {frozenset({k: v for k, v in s["metric"].items()}.items()): float(s["value"][1])
                  for s in prom.query(expr, at=at)}
        ours = vector(parsed.eval(HistoryAt(keeper, at)))
        # an expression that selects nothing checks nothing (where it reaches back into the weeks)
        assert theirs or at - parsed.longest_reach < START, (expr, at)
        assert set(ours) == set(theirs), (expr, at)
        for key, value in theirs.items():
            assert math.isclose(ours[key], value, rel_tol=1e-9, abs_tol=1e-12), (expr, at, dict(key), ours[key], value)


def trend_rules() -> list[AlertRule]:
    """The shipped trend rules that read these worlds' metrics."""
    return [rule for rule in load_rules([Path("alerts/trend.yml")]).rules if rule.metrics & {TTFT, TPOT}]


@pytest.mark.prometheus
def test_shipped_trend_rules_equal_prometheus(both: tuple[PrometheusServer, HistoryKeeper]) -> None:
    """Every shipped trend rule reading these metrics gives Prometheus' vector at the end of the
    weeks: the young and the old creeps creep, the fast ones forecast, the stepped one stepped,
    the seasonal one is quiet."""
    prom, keeper = both
    rules = {rule.name: rule for rule in trend_rules()}
    assert set(rules) == set(EXPECTED_AT_END)  # a new rule on these metrics needs its expectation here
    at = HistoryAt(keeper, END)  # one for every rule, as the embedded evaluator reads them
    shown: dict[str, dict[str, float]] = {}
    for name, models in EXPECTED_AT_END.items():
        rule = rules[name]
        theirs = {frozenset(s["metric"].items()): float(s["value"][1]) for s in prom.query(rule.expr_text, at=END)}
        ours = vector(rule.expr.eval(at))
        assert set(ours) == set(theirs), name
        assert {dict(key)["model"] for key in ours} == models, name
        for key, value in theirs.items():
            assert math.isclose(ours[key], value, rel_tol=1e-9), name
        shown[name] = {dict(key)["model"]: value for key, value in ours.items()}
    # the values: a creep's growth in %/day (compounded: the young ones over their last day and a
    # half, the old one week over week), a step's level against a week before, a forecast's days
    assert shown["TTFTP99Creep"] == pytest.approx({"creeping": 4.0, "fast": 8.0}, abs=0.3)
    assert shown["TPOTP99Creep"] == pytest.approx({"creeping": 3.0, "fast": 8.0, "old": 2.0}, abs=0.3)
    assert shown["TTFTP99Step"]["stepped"] == pytest.approx(1.3, abs=0.02)
    assert shown["TTFTP99CreepForecast"]["fast"] == pytest.approx(days_to(1.0, FAST_TTFT, 1.08), rel=0.03)
    assert shown["TPOTP99CreepForecast"]["fast"] == pytest.approx(days_to(0.05, FAST_TPOT, 1.08), rel=0.03)
    assert 0 < shown["TPOTP99CreepForecast"]["fast"] < shown["TTFTP99CreepForecast"]["fast"] < 7


def days_to(threshold: float, shape: Callable[[float], float], per_day: float) -> float:
    """Days until the last 6 hours' mean of `shape` (without noise), grown by `per_day`, crosses `threshold`."""
    level = float(np.mean([shape(t) for t in np.arange(END - 6 * 3600, END, 300.0)]))
    return math.log(threshold / level) / math.log(per_day)


class _Forgetful(dict[Any, Any]):
    """A cache that keeps nothing: every range function read afresh."""

    def __setitem__(self, key: Any, value: Any) -> None:
        """Forget it: the next read of the same level evaluates it again."""


def test_one_history_at_shared_by_rules_gives_each_rules_vector(keeper: HistoryKeeper) -> None:
    """The per-instant cache: the trend rules read through one HistoryAt (their shared levels read
    once) give the vectors each gives through a fresh HistoryAt of its own, and without a cache."""
    rules = trend_rules()
    assert {rule.name for rule in rules} == set(EXPECTED_AT_END)
    for at in (END, END - DAY - 1234.5):
        shared = HistoryAt(keeper, at)
        together = [vector(rule.expr.eval(shared)) for rule in rules]
        again = [vector(rule.expr.eval(shared)) for rule in reversed(rules)][::-1]  # every level from the cache
        fresh = [HistoryAt(keeper, at) for _ in rules]
        alone = [vector(rule.expr.eval(here)) for rule, here in zip(rules, fresh, strict=True)]
        uncached = HistoryAt(keeper, at)
        uncached.cache = _Forgetful()
        without = [vector(rule.expr.eval(uncached)) for rule in rules]
        assert together == again == alone == without
        assert any(together)  # the creeping and stepped series fire something
        assert 0 < len(shared.cache) < sum(len(here.cache) for here in fresh)  # the rules shared levels


@pytest.mark.prometheus
def test_an_evaluation_error_is_the_rules_not_an_exception(both: tuple[PrometheusServer, HistoryKeeper]) -> None:
    """Two right-hand series for one left-hand series: Prometheus answers 422, we raise TrendError."""
    prom, keeper = both
    expr = f"avg_over_time({TTFT}[6h]) / ignoring(quantile) avg_over_time({TPOT}[6h])"
    with pytest.raises(httpx.HTTPStatusError):
        prom.query(expr, at=END)
    with pytest.raises(TrendError, match=r"many-to-(one|many)"):
        parse(expr).eval(HistoryAt(keeper, END))
