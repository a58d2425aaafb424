"""The trend expressions give the real Prometheus' numbers on the same two weeks of points.

Three weeks of 5-minute points (seasonal, creeping, stepped series of two metrics) go into a real
`prometheus` (as TSDB blocks from `promtool tsdb create-blocks-from openmetrics`) and into the
monitor's history; every expression below, queried at instants off the 5-minute grid, must give
the same series with the same values to 1e-9.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest

from bench.promserver import PrometheusServer
from monitor.history.keeper import HistoryKeeper, Wanted
from monitor.rulefiles.promql import HistoryAt, TrendError, TrendExpr
from monitor.rulefiles.rules import load_rules
from tests.conftest import require_binary
from tests.history.worlds import DAY, WEEK, World, creeping, openmetrics, seasonal, stepped, stored_days

pytestmark = pytest.mark.prometheus

END = 1_780_000_000.0  # a Thursday in 2026, 18:26:40 UTC
START = END - 3 * WEEK
TTFT = "inference_ttft_seconds"
TPOT = "inference_tpot_seconds"


def labels(target: str, model: str, quantile: str = "0.99") -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", quantile), ("target", target), ("window", "5m"))


WORLDS = [
    World(TTFT, {
        labels("a", "creeping"): creeping(seasonal(0.3), END - 3 * DAY, 0.04),
        labels("b", "seasonal"): seasonal(0.3),
        labels("c", "stepped"): stepped(seasonal(0.3), END - 4 * DAY, 1.3),
        labels("a", "creeping", "0.5"): seasonal(0.1),
    }),
    World(TPOT, {
        labels("a", "creeping"): creeping(seasonal(0.02, 0.1), END - 5 * DAY, 0.03),
        labels("b", "seasonal"): seasonal(0.02, 0.1),
    }),
]

SEL = f'{TTFT}{{quantile="0.99"}}'
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
]


def vector(result: Sequence[tuple[Mapping[str, str], float]]) -> dict[frozenset[tuple[str, str]], float]:
    out = {frozenset(labels.items()): value for labels, value in result}
    assert len(out) == len(result)
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, HistoryKeeper]]:
    promtool = require_binary("promtool")
    source = Path(tmp_path_factory.mktemp("weeks")) / "weeks.om"
    source.write_text(openmetrics(WORLDS, START, END))
    prom = PrometheusServer({}, binary=require_binary("prometheus"), retention="60d")
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=24h", str(source), str(prom.dir / "data")],
                   check=True, capture_output=True)
    keeper = HistoryKeeper([Wanted(TTFT), Wanted(TPOT)], memory_days=30)
    keeper.load(stored_days(WORLDS, START, END), END)
    with prom:
        yield prom, keeper


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_expression_equals_prometheus(both: tuple[PrometheusServer, HistoryKeeper], expr: str) -> None:
    prom, keeper = both
    parsed = TrendExpr(expr)
    for at in (END - 17.5, END - 2 * DAY - 3600 - 123.25, END - 6 * DAY - 61):
        theirs = {frozenset({k: v for k, v in s["metric"].items()}.items()): float(s["value"][1])
                  for s in prom.query(expr, at=at)}
        ours = vector(parsed.eval(HistoryAt(keeper, at)))
        assert theirs, (expr, at)  # an expression that selects nothing checks nothing
        assert set(ours) == set(theirs), (expr, at)
        for key, value in theirs.items():
            assert math.isclose(ours[key], value, rel_tol=1e-9, abs_tol=1e-12), (expr, at, dict(key), ours[key], value)


def test_shipped_trend_rules_equal_prometheus(both: tuple[PrometheusServer, HistoryKeeper]) -> None:
    """Every shipped trend rule reading these metrics gives Prometheus' vector at the end of the
    weeks: the creeping model creeps, the stepped one stepped, the seasonal one is quiet."""
    prom, keeper = both
    expected = {"TTFTP99Creep": {"creeping"}, "TTFTP99Step": {"stepped"}, "TPOTP99Creep": {"creeping"},
                "TPOTP99Step": set()}
    rules = {rule.name: rule for rule in load_rules([Path("alerts/trend.yml")]).rules}
    for name, models in expected.items():
        rule = rules[name]
        theirs = {frozenset(s["metric"].items()): float(s["value"][1]) for s in prom.query(rule.expr_text, at=END)}
        ours = vector(rule.expr.eval(HistoryAt(keeper, END)))
        assert set(ours) == set(theirs), name
        assert {dict(key)["model"] for key in ours} == models, name
        for key, value in theirs.items():
            assert math.isclose(ours[key], value, rel_tol=1e-9), name


def test_an_evaluation_error_is_the_rules_not_an_exception(both: tuple[PrometheusServer, HistoryKeeper]) -> None:
    """Two right-hand series for one left-hand series: Prometheus answers 422, we raise TrendError."""
    prom, keeper = both
    expr = f"avg_over_time({TTFT}[6h]) / ignoring(quantile) avg_over_time({TPOT}[6h])"
    with pytest.raises(httpx.HTTPStatusError):
        prom.query(expr, at=END)
    with pytest.raises(TrendError, match=r"many-to-(one|many)"):
        TrendExpr(expr).eval(HistoryAt(keeper, END))
