"""Snapshots -> numbers, on pages whose expected PromQL results are computed by hand.

Ranges are left-open as in Prometheus 3.x: a sample exactly `w` before the evaluation time is
outside `[w]`. Tests whose samples start at t=0 and evaluate at t=60 use a 61 s window so the
first sample is inside; rate() then extrapolates by 1 s to the edge, which for a counter that does
not start at 0 gives exactly the increase over 60 s divided by 60 s.
"""

import math
from collections.abc import Iterable

import pytest

from monitor.promtext import parse
from monitor.service.derive import Objectives, Rates, Window, fleet_rates, stats_from_rates, window_rates
from monitor.service.engines import VLLM_V0, VLLM_V1
from monitor.service.extract import Snapshot, extract
from monitor.service.series import SeriesStore

MODEL = "m"


def page(ttft: dict[str, float], success: float, engine: str = "0", gen: float = 0.0) -> str:
    labels = f'engine="{engine}",model_name="{MODEL}"'
    lines = [f"vllm:kv_cache_usage_perc{{{labels}}} 0.5"]
    for le, count in ttft.items():
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} {count}')
    lines.append(f'vllm:request_success_total{{{labels},finished_reason="stop"}} {success}')
    lines.append(f"vllm:generation_tokens_total{{{labels}}} {gen}")
    return "\n".join(lines) + "\n"


def snap(text: str, ts: float) -> Snapshot:
    return extract(parse(text, VLLM_V1.wanted), VLLM_V1, ts, "unknown")


def store(snapshots: list[Snapshot]) -> SeriesStore:
    series = SeriesStore(3600)
    for snapshot in snapshots:
        series.append(snapshot)
    return series


def test_quantile_over_window_uses_bucket_increases() -> None:
    start = {"0.1": 100, "0.2": 100, "1": 100, "+Inf": 100}
    end = {"0.1": 150, "0.2": 170, "1": 210, "+Inf": 220}  # increases: 50, 70, 110, 120
    history = [snap(page(start, 100), 0.0), snap(page(end, 220), 60.0)]
    assert window_rates(store(history), 60.0, Window("1m", 60)) == {}  # t=0 is outside (0, 60]
    rates = window_rates(store(history), 60.0, Window("61s", 61))[MODEL]
    stats = stats_from_rates(rates, Objectives())
    assert stats.quantiles["ttft"][0.5] == pytest.approx(0.15)
    assert stats.requests_per_second == pytest.approx(2.0)
    assert stats.slo_attainment["ttft"] == pytest.approx(70 / 120)


def test_two_engines_rate_per_series_then_sum() -> None:
    # Engine 1 restarts (its counter drops): only its own series is reset-corrected.
    a = [snap(page({"+Inf": 0}, 100, "0") + page({"+Inf": 0}, 50, "1"), 0.0),
         snap(page({"+Inf": 0}, 130, "0") + page({"+Inf": 0}, 5, "1"), 30.0),
         snap(page({"+Inf": 0}, 160, "0") + page({"+Inf": 0}, 35, "1"), 60.0)]
    rates = window_rates(store(a), 60.0, Window("61s", 61))[MODEL]
    assert rates.counters["requests"] == pytest.approx((60 + 35) / 60)


def test_fleet_uses_shared_bucket_bounds() -> None:
    fine = {"0.1": 0, "0.2": 0, "0.5": 0, "1": 0, "+Inf": 0}
    fine_end = {"0.1": 10, "0.2": 20, "0.5": 30, "1": 40, "+Inf": 40}
    coarse = {"0.2": 0, "1": 0, "+Inf": 0}
    coarse_end = {"0.2": 40, "1": 40, "+Inf": 40}
    window = Window("61s", 61)
    target_a = window_rates(store([snap(page(fine, 0), 0), snap(page(fine_end, 40), 60)]), 60, window)
    target_b = window_rates(store([snap(page(coarse, 0), 0), snap(page(coarse_end, 40), 60)]), 60, window)
    fleet = fleet_rates([target_a, target_b])[MODEL]
    assert sorted(fleet.buckets["ttft"]) == [0.2, 1.0, math.inf]
    per_s = 1 / 61  # counters from 0 are not extrapolated back past their zero point
    assert fleet.buckets["ttft"][0.2] == pytest.approx((20 + 40) * per_s)
    assert fleet.counters["requests"] == pytest.approx(80 * per_s)
    # Fleet median: 40 of 80 below 0.2... rank 40 -> 0.2 * (40/60)
    assert stats_from_rates(fleet, Objectives()).quantiles["ttft"][0.5] == pytest.approx(0.2 * 40 / 60)


def test_no_observations_export_nothing() -> None:
    flat = {"0.1": 5, "+Inf": 5}
    history = [snap(page(flat, 5), 0.0), snap(page(flat, 5), 30.0)]
    stats = stats_from_rates(window_rates(store(history), 30.0, Window("31s", 31))[MODEL], Objectives())
    assert "ttft" not in stats.quantiles
    assert stats.requests_per_second == 0.0
    assert stats.error_ratio is None  # no finished requests: no ratio, not 0


def test_baseline_ratio() -> None:
    # Scraped every 30 s: 100 tokens/s until t=120, then 50/s; the window (120, 180] holds 150 and
    # 180 (extrapolated by one step to 60 s), the baseline (0, 120] holds 30..120.
    points = [(t, 1000 + 100 * min(t, 120) + 50 * max(t - 120, 0)) for t in range(0, 181, 30)]
    history = [snap(page({"+Inf": 0}, 0, gen=g), t) for t, g in points]
    rates = window_rates(store(history), 180, Window("1m", 60), store(history), 120)[MODEL]
    stats = stats_from_rates(rates, Objectives())
    assert stats.generation_tokens_per_second == pytest.approx(50.0)
    assert stats.throughput_baseline_ratio == pytest.approx(0.5)


def test_gauges_pid_copies_count_once() -> None:
    text = (
        'vllm:gpu_cache_usage_perc{model_name="m",pid="11"} 0.7\n'
        'vllm:gpu_cache_usage_perc{model_name="m",pid="12"} 0.7\n'
        'vllm:num_requests_running{model_name="m",pid="11"} 4\n'
        'vllm:num_requests_running{model_name="m",pid="12"} 4\n'
    )
    snapshot = extract(parse(text, VLLM_V0.wanted), VLLM_V0, 0.0, "unknown")
    assert snapshot.gauges["running"] == {"m": 4.0}
    assert snapshot.gauges["kv_cache"] == {"m": 0.7}


def test_series_missing_from_a_scrape_and_late_series() -> None:
    # Engine 1 appears at the second scrape; engine 0 is missing from the third.
    snaps = [
        snap(page({"+Inf": 0}, 10, "0"), 0.0),
        snap(page({"+Inf": 0}, 20, "0") + page({"+Inf": 0}, 0, "1"), 15.0),
        snap(page({"+Inf": 0}, 6, "1"), 30.0),
        snap(page({"+Inf": 0}, 40, "0") + page({"+Inf": 0}, 12, "1"), 45.0),
    ]
    rates = window_rates(store(snaps), 45.0, Window("46s", 46))[MODEL]
    # engine 0: points (0,10) (15,20) (45,40): increase 30 over 45 s, extrapolated 1 s to the edge.
    # engine 1: points (15,0) (30,6) (45,12): 12 over 30 s, a counter from 0 is not extrapolated back.
    assert rates.counters["requests"] == pytest.approx((30 * 46 / 45 + 12) / 46)


def test_store_trims_old_columns() -> None:
    series = SeriesStore(retention_seconds=60)
    for i in range(100):
        series.append(snap(page({"+Inf": i}, i), float(i)))
    assert len(series.times) < 60 + 17
    rates = window_rates(series, 99.0, Window("1m", 60))[MODEL]
    assert rates.counters["requests"] == pytest.approx(1.0)


def test_same_bound_written_differently_through_the_store() -> None:
    # Prometheus' mixed_bucket: le="0.2", "2e-1" and "2.0e-1" are three series, rate()'d apart and
    # merged into one bucket at quantile time; P50 is 0.15 (0.2 if they overwrote each other).
    def mixed(n: float) -> str:
        labels = f'engine="0",model_name="{MODEL}"'
        bounds = {"0.1": n, "0.2": n, "2e-1": n, "2.0e-1": n, "+Inf": 4 * n}
        lines = [f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} {c}' for le, c in bounds.items()]
        return "\n".join([f"vllm:kv_cache_usage_perc{{{labels}}} 0.5", *lines]) + "\n"

    history = [snap(mixed(10), 0.0), snap(mixed(20), 30.0), snap(mixed(30), 60.0)]
    stats = stats_from_rates(window_rates(store(history), 60.0, Window("1m", 60))[MODEL], Objectives())
    assert stats.quantiles["ttft"][0.5] == pytest.approx(0.15)


def test_a_window_where_no_series_has_two_samples_has_no_rate_though_a_reset_is_on_record() -> None:
    # A counter reset, then its series gone, and another series seen once: a window over the last
    # two scrapes holds no series with two samples. It has no rate, as in Prometheus; before, the
    # reset's reading took the minimum of no columns, and the target was called down for it.
    series = SeriesStore(3600)
    x, y = (("engine", "0"),), (("engine", "1"),)
    for ts, present in ((1000.0, {x: 10.0}), (1015.0, {x: 2.0}), (1030.0, {y: 5.0}), (1045.0, {})):
        series.append(Snapshot(ts=ts, counters={"requests": {MODEL: present}}))
    assert series.rates(1020.0, 1045.0) == {}
    assert list(series.family_rates(1020.0, 1045.0)) == []
    # Over the whole stretch x has two samples, its reset added back: the reference rate().
    expected = reference_rate([[(1000.0, 10.0), (1015.0, 2.0)], [(1030.0, 5.0)]], 1045.0, 46.0)
    assert series.rates(999.0, 1045.0) == {("counter", "requests", MODEL, None): pytest.approx(expected, rel=1e-12)}


def test_stores_of_the_same_series_share_their_keys_and_a_full_table_loses_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Replicas of one model write the same series: their stores keep one copy of each key and
    # group between them. When the shared table is full it starts again; the stores read the same.
    import monitor.service.series as series_module
    from monitor.intern import Interned

    def snaps(model: str) -> list[Snapshot]:
        labels = (("model_name", model),)
        bounds = ((0.1, 1.0), (1.0, 2.0), (math.inf, 3.0))
        return [Snapshot(ts=1000.0 + 15 * i,
                         counters={"requests": {model: {labels: 10.0 * i}},
                                   "generation_tokens": {model: {labels: 5.0 * i}}},
                         buckets={"ttft": {model: {(labels, le): n * i for le, n in bounds}}})
                for i in range(6)]

    one, two = SeriesStore(3600), SeriesStore(3600)
    for each in snaps("a"):
        one.append(each)
        two.append(each)
    assert len(one.keys) == 5 and list(one.keys) == list(two.keys)
    assert all(a is b for a, b in zip(one.keys, two.keys, strict=True))
    monkeypatch.setattr(series_module, "_shared_key", Interned(3))
    small = SeriesStore(3600)
    for each in snaps("b"):
        small.append(each)
    assert len(series_module._shared_key) <= 3  # cleared as it filled
    expected = {(kind, metric, "b", le): rate for (kind, metric, _, le), rate in one.rates(1000.0, 1075.0).items()}
    assert len(expected) == 5 and small.rates(1000.0, 1075.0) == expected


def test_a_series_gone_for_the_whole_retention_is_dropped_without_moving_the_others() -> None:
    # Engine 0 stops after 10 scrapes; when its rows age out (trimmed with the columns), engine 1's
    # rows move up, in the same append that writes engine 1's new value (and a new engine 2 joins).
    series = SeriesStore(retention_seconds=30)
    for i in range(80):
        text = page({"+Inf": i}, 2.0 * i, "1")
        if i < 10:
            text += page({"+Inf": i}, 5.0 * i, "0")
        if i >= 50:
            text += page({"+Inf": i}, 3.0 * i, "2")
        series.append(snap(text, float(i)))
    assert not any(key[3] and ("engine", "0") in key[3] for key in series.keys)  # aged out
    rates = window_rates(series, 79.0, Window("20s", 20))[MODEL]
    assert rates.counters["requests"] == pytest.approx(2.0 + 3.0)


def test_a_target_memo_reads_its_pages_as_a_fresh_extract_does() -> None:
    # Scrape after scrape the memo splits bucket families by the plan of the last one; a page whose
    # families changed (a bucket gone, a model added, a non-finite count, another default model)
    # must read exactly as an extract without a memo reads it.
    from monitor.promtext import Parser
    from monitor.service.extract import ExtractMemo

    ttft = {"0.1": 1.0, "1": 3.0, "+Inf": 4.0}
    pages = [
        page(ttft, 10.0),
        page({le: c + 1 for le, c in ttft.items()}, 11.0),  # values only: the plan holds
        page({"0.1": 2.0, "+Inf": 5.0}, 12.0),  # a bucket gone
        page({"0.1": 2.0, "+Inf": 5.0}, 12.0) + page(ttft, 1.0, engine="1").replace(f'"{MODEL}"', '"other"'),
        page({"0.1": float("nan"), "+Inf": 6.0}, 13.0),  # a non-finite count: dropped and counted
        page({"0.1": 3.0, "+Inf": 7.0}, 14.0),
    ]
    parser, memo = Parser(), ExtractMemo()
    for ts, text in enumerate(pages):
        for default in ("unknown", "unknown", "pinned"):
            parsed = parser.parse(text, VLLM_V1.wanted)
            assert extract(parsed, VLLM_V1, float(ts), default, memo) == extract(parsed, VLLM_V1, float(ts), default)
    fresh = extract(parse(pages[4], VLLM_V1.wanted), VLLM_V1, 4.0, "unknown")
    assert fresh.non_finite == 1 and extract(parser.parse(pages[4], VLLM_V1.wanted), VLLM_V1, 4.0, "unknown",
                                             memo).non_finite == 1


def test_a_memo_gives_bucket_columns_that_read_as_the_dicts() -> None:
    # The memo's buckets are the plan's keys beside this scrape's values, not a dict hashing each
    # (labels, le) again: read as a mapping, pickled (parse workers) and stored (baseline points)
    # they are the dict a fresh extract gives.
    import pickle

    from monitor.promtext import Columns, Parser
    from monitor.service.baseline import _decode, _encode
    from monitor.service.extract import ExtractMemo

    ttft = {"0.1": 1.0, "1": 3.0, "+Inf": 4.0}
    parser, memo = Parser(), ExtractMemo()
    first = extract(parser.parse(page(ttft, 10.0), VLLM_V1.wanted), VLLM_V1, 1.0, "unknown", memo)
    later = extract(parser.parse(page({le: 2 * c for le, c in ttft.items()}, 20.0), VLLM_V1.wanted), VLLM_V1, 2.0,
                    "unknown", memo)
    fresh = extract(parse(page({le: 2 * c for le, c in ttft.items()}, 20.0), VLLM_V1.wanted), VLLM_V1, 2.0, "unknown")
    series, plain = later.buckets["ttft"][MODEL], fresh.buckets["ttft"][MODEL]
    assert isinstance(series, Columns) and isinstance(plain, dict)
    assert all(a is b for a, b in zip(series, first.buckets["ttft"][MODEL], strict=True))  # the plan's keys
    assert series == plain and plain == series and dict(series) == plain
    assert list(series.items()) == list(plain.items()) and list(series.values()) == list(plain.values())
    key = next(iter(plain))
    assert series[key] == plain[key] and key in series and len(series) == len(plain)
    assert series.get(("nothing", 0.0)) is None
    assert pickle.loads(pickle.dumps(series)) == plain
    assert _decode(2.0, _encode(later)).buckets == fresh.buckets


@pytest.mark.parametrize("seed", range(6))
def test_store_rates_equal_the_reference_per_series_with_gaps_at_any_column(seed: int) -> None:
    # Each series misses random scrapes, the window's end columns included, and some restart
    # (their counter drops): the store's per-group sum must equal the sum of the reference
    # promql rate of each series alone. Rows holding both end columns take the store's short way,
    # the others its scan; a series with fewer than two samples in the window adds nothing.
    import random


    rng = random.Random(seed)
    names = [(("engine", str(i)),) for i in range(40)]
    values = {labels: rng.uniform(0, 50) for labels in names}
    points: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {labels: [] for labels in names}
    series = SeriesStore(3600)
    for step in range(30):
        ts = round(10_000 + 15.0 * step + rng.uniform(-0.4, 0.4), 3)  # the store keeps ms
        present: dict[tuple[tuple[str, str], ...], float] = {}
        for labels in names:
            values[labels] = rng.uniform(0, 5) if rng.random() < 0.05 else values[labels] + rng.uniform(0, 9)
            if rng.random() < 0.7 or labels == names[0]:
                present[labels] = values[labels]
                points[labels].append((ts, values[labels]))
        series.append(Snapshot(ts=ts, counters={"requests": {MODEL: present}}))
    end = series.times[-1] / 1000
    for seconds in (60.0, 120.0, 300.0):
        expected = reference_rate(points.values(), end, seconds)
        got = series.rates(end - seconds, end)[("counter", "requests", MODEL, None)]
        assert got == pytest.approx(expected, rel=1e-9)


def reference_rate(each: Iterable[list[tuple[float, float]]], end: float, seconds: float) -> float | None:
    """`sum(rate(x[seconds]))` at `end`, the reference promql on each series' samples; None: no series has one."""
    from tests.support.promql_oracle import extrapolated_increase

    rates = [increase / seconds for points in each if (increase := extrapolated_increase(
        [(t, v) for t, v in points if end - seconds < t <= end], end - seconds, end)) is not None]
    return sum(rates) if rates else None


@pytest.mark.parametrize("seed", range(4))
def test_store_rates_equal_the_reference_while_columns_trim_and_rows_come_and_go(seed: int) -> None:
    # A short retention, so columns are trimmed and rows age out and come back while the store
    # runs: series leave for longer than the retention, restart (a drop) just before or inside a
    # window, miss scrapes in between, and return. After every scrape each window's per-group sum
    # must be the reference promql rate of each series on the samples inside it, so a reset whose
    # earlier sample has aged out of the window (or the store) adds nothing, as in Prometheus.
    import random


    rng = random.Random(seed)
    names = [(("engine", str(i)),) for i in range(24)]
    values = {labels: rng.uniform(0, 50) for labels in names}
    away = dict.fromkeys(names, 0)  # scrapes left before a series that left comes back
    points: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {labels: [] for labels in names}
    series = SeriesStore(retention_seconds=120)
    for step in range(160):
        ts = round(10_000 + 5.0 * step + rng.uniform(-0.4, 0.4), 3)
        present: dict[tuple[tuple[str, str], ...], float] = {}
        for labels in names:
            values[labels] = rng.uniform(0, 5) if rng.random() < 0.06 else values[labels] + rng.uniform(0, 9)
            if away[labels]:
                away[labels] -= 1
                continue
            if rng.random() < 0.03 and labels != names[0]:
                away[labels] = rng.choice((3, 30, 40))  # 30 scrapes is longer than the retention
                continue
            if rng.random() < 0.85 or labels == names[0]:
                present[labels] = values[labels]
                points[labels].append((ts, values[labels]))
        series.append(Snapshot(ts=ts, counters={"requests": {MODEL: present}}))
        end = series.times[-1] / 1000
        for seconds in (10.0, 60.0, 120.0):
            expected = reference_rate(points.values(), end, seconds)
            got = series.rates(end - seconds, end).get(("counter", "requests", MODEL, None))
            assert (got is None) == (expected is None)
            if got is not None:
                assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), (step, seconds)
    assert len(series.times) <= 120 / 5 + 17  # trimmed as it went


def test_family_rates_are_the_group_rates_by_family() -> None:
    # What window_rates reads (family by family, `le` -> rate) is rates() regrouped: the same
    # numbers, no group missing or added, also where a bucket stops appearing part-way (its
    # family then lists only the buckets with a rate) and where a model comes later.
    snapshots = []
    for step in range(8):
        ttft = {"0.1": 2.0 * step, "0.5": 3.0 * step, "+Inf": 4.0 * step}
        if step >= 6:
            del ttft["0.5"]  # gone from the last scrapes: under two samples in a short window
        text = page(ttft, success=5.0 * step, gen=7.0 * step)
        if step >= 3:
            text += page({"1": step, "+Inf": 2.0 * step}, success=step).replace(f'model_name="{MODEL}"',
                                                                            'model_name="late"')
        snapshots.append(snap(text, 15.0 * step))
    series = store(snapshots)
    for seconds in (20.0, 61.0, 200.0):
        expected = series.rates(105.0 - seconds, 105.0)
        regrouped = {(kind, metric, model, le): rate
                     for (kind, metric, model), by_le in series.family_rates(105.0 - seconds, 105.0)
                     for le, rate in by_le.items()}
        assert regrouped == expected
        assert list(regrouped) == list(expected)  # and in the same order, each family's groups having come together
    assert ("bucket", "ttft", MODEL, 0.5) not in series.rates(85.0, 105.0)
    assert ("bucket", "ttft", MODEL, 0.5) in series.rates(44.0, 105.0)


def _summed_bucket_by_bucket(each: list[dict[float, float]]) -> dict[float, float]:
    """The fleet's bucket sum as it was written before numpy: target after target, on shared bounds."""
    shared = set(each[0]).intersection(*each[1:])
    summed: dict[float, float] = {}
    for le_rates in each:
        for le, value in le_rates.items():
            summed[le] = summed.get(le, 0.0) + value
    return {le: value for le, value in summed.items() if le in shared}


@pytest.mark.parametrize("targets", [2, 3, 1000])
def test_the_fleet_bucket_sum_is_the_sequential_sum_bit_for_bit(targets: int) -> None:
    # Rates whose sum depends on the order it is taken in (1e16 swallows a 1 added after it, not
    # 1e16 other ones): numpy's row sum must add target after target, as the loop did, or the
    # fleet's quantiles move in their last bits against what they were.
    import random

    rng = random.Random(targets)
    bounds = [0.1, 0.5, 1.0, 2.5, math.inf]
    for shape in ("same", "reordered", "one_short", "one_more", "single_bound"):
        each = []
        for index in range(targets):
            les = list(bounds[-1:] if shape == "single_bound" else bounds)
            if shape == "reordered" and index % 2:
                les.reverse()
            if shape == "one_short" and index == targets - 1:
                les.remove(0.5)
            if shape == "one_more" and index == 1:
                les.append(5.0)
            each.append({le: rng.choice((1e16, 1.0, 1e-8, -0.0, rng.uniform(0, 1e6), 1 / 3)) for le in les})
        per_target = [{MODEL: Rates(buckets={"ttft": rates}, baseline_buckets={"prompt_len": rates})}
                      for rates in each]
        fleet = fleet_rates(per_target)[MODEL]
        expected = _summed_bucket_by_bucket(each)
        for summed in (fleet.buckets["ttft"], fleet.baseline_buckets["prompt_len"]):
            assert list(summed) == list(expected), shape  # the same bounds, in the first target's order
            assert [repr(v) for v in summed.values()] == [repr(v) for v in expected.values()], shape


@pytest.mark.parametrize("one_order", [False, True])
def test_a_derivation_of_many_histograms_at_once_equals_each_window_on_its_own(one_order: bool) -> None:
    # Over VECTOR_HISTOGRAMS the quantiles and objective shares go through numpy by set of bounds
    # (walked where few share them); one window alone is always walked. Same numbers, bit for bit.
    # A store gives every histogram of an engine its bounds in one order, not always ascending
    # (`one_order`): numpy reads them in that order, sorted once; otherwise each has its own.
    import random

    from monitor.service.derive import VECTOR_HISTOGRAMS, stats_many

    rng = random.Random(7)
    common = [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, math.inf]
    rare = [0.3, 3.0, math.inf]  # bounds only a few histograms have: walked inside the numpy path

    def buckets(bounds: list[float]) -> dict[float, float]:
        counts = sorted(rng.choice((0.0, rng.uniform(0, 40))) for _ in bounds)
        if rng.random() < 0.2:
            counts[3 % len(counts)] *= 1 + 1e-13  # a rise inside the small-delta tolerance
        order = list(zip(bounds, counts, strict=True))
        if one_order and len(order) == len(shuffled):
            return dict(order[i] for i in shuffled)
        rng.shuffle(order)  # a dict's order is the page's, not the bounds'
        return dict(order)

    shuffled = list(range(len(common)))
    rng.shuffle(shuffled)

    windows = []
    for index in range(24):
        metrics = {name: buckets(common) for name in ("ttft", "tpot", "e2e", "queue", "prefill", "decode")}
        metrics["inference"] = buckets(rare if index < 3 else common)
        metrics["prompt_len"] = buckets(common)
        windows.append(Rates(counters={"requests": 1.0}, buckets=metrics))
    assert sum(len(rates.buckets) for rates in windows) >= VECTOR_HISTOGRAMS
    objectives = Objectives(ttft_seconds=0.2, tpot_seconds=0.05)
    together = stats_many(windows, objectives)
    assert together == [stats_from_rates(rates, objectives) for rates in windows]
    assert all(stats.quantiles and stats.slo_attainment for stats in together)


@pytest.mark.parametrize("targets", [2, 3, 200])
def test_the_fleet_sum_by_rows_equals_the_sum_by_name_bit_for_bit(targets: int) -> None:
    # Targets of one layout are summed as rows (`_sum_by_rows`); the sum name by name is the
    # reference. Their dicts hold equal bounds as other float objects (as a parse worker's, read
    # back from a pickle, hold them), and values whose sum depends on the order taken.
    import pickle
    import random
    from typing import Any

    from monitor.service.derive import _sum_by_name, _sum_by_rows, compact, expand, intern_row

    rng = random.Random(targets)
    bounds = [0.1, 0.5, 1.0, 2.5, math.inf]

    def value() -> float:
        return rng.choice((1e16, 1.0, 1e-8, -0.0, rng.uniform(0, 1e6), 1 / 3))

    def rates(extra: bool = False) -> Rates:
        made = Rates(counters={"requests": value(), "generation_tokens": value()},
                     buckets={"ttft": {le: value() for le in bounds}, "e2e": {le: value() for le in bounds[1:]}},
                     baseline_counters={"generation_tokens": value()},
                     baseline_buckets={"prompt_len": {le: value() for le in bounds}},
                     http_all=value(), baseline_coverage=rng.random())
        if extra:
            made.counters["errors"] = value()
        return pickle.loads(pickle.dumps(made))  # fresh float objects for every bound

    def bits(total: Rates) -> str:
        return repr((total.counters, total.buckets, total.baseline_counters, total.baseline_buckets))

    for shape in ("same", "one_other"):
        each = [rates(extra=shape == "one_other" and index == targets - 1) for index in range(targets)]
        by_rows, by_name = Rates(), Rates()
        assert _sum_by_rows(by_rows, each) is (shape == "same")  # another layout: summed by name
        _sum_by_name(by_name, each)
        fleet = fleet_rates([{MODEL: r} for r in each])[MODEL]
        assert bits(fleet) == bits(by_name), shape
        # As a parse worker sends them: the numbers in the row alone, read back, the layout interned.
        sent = [pickle.loads(pickle.dumps(compact(r))) for r in each]
        assert not sent[0].counters and not sent[0].buckets and sent[0].row is not None
        known: dict[int, Any] = {}
        for r in sent:
            intern_row(r, known)
        assert bits(expand(sent[0])) == bits(each[0])
        assert bits(fleet_rates([{MODEL: r} for r in sent])[MODEL]) == bits(by_name), shape
        if shape == "same":
            assert bits(by_rows) == bits(by_name)
            assert list(fleet.buckets) == ["ttft", "e2e"] and list(fleet.buckets["e2e"]) == bounds[1:]
        assert fleet.http_all == sum_in_order(r.http_all for r in each)
        assert fleet.baseline_coverage == min(r.baseline_coverage or 1.0 for r in each)
    assert not _sum_by_rows(Rates(), [rates()])  # one target: nothing to add


def sum_in_order(values: Iterable[float | None]) -> float | None:
    total: float | None = None
    for v in values:
        total = v if total is None else total if v is None else total + v
    return total
