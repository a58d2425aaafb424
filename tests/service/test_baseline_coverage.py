"""A baseline exists only once its window is covered, and a restart keeps it.

The simulator (monitor/sim) under constant load, on the real clock, with a short baseline: the
throughput ratio is absent (never a guess) and status says "baseline warming up" until the
history reaches back over 90 % of the baseline window; then it is about 1.0. A monitor restarted
on the same database reloads the baseline's points and has the ratio again within two scrapes
instead of a whole baseline window later.

Measured on a loaded 2-core machine: ratio 0.95-1.05 once covered; absent for the first ~11 s.
Beside two CPU hogs the load itself is not constant (a starved sender catches up in bursts: 1.6
was seen), so the ratio is held to the one the simulator's own token log gives for the same
stretches, not to 1.0.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from monitor.clock import SteadyClock
from monitor.config import load_settings
from monitor.health import HealthBook
from monitor.runtime import Monitor
from monitor.service.collector import ServiceCollector
from monitor.service.derive import BASELINE_COUNTERS, LENGTH_HISTOGRAMS, Window, window_rates
from monitor.service.extract import Snapshot
from monitor.service.promql import extrapolate
from monitor.service.series import SeriesStore
from monitor.sim import EngineConfig, LatencyProfile, SimServer, SimulatedEngine
from monitor.sim.stats import IterationStats
from tests.conftest import FIXTURES
from tests.service.pagegen import grow

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
WINDOW, BASELINE = 4.0, 8.0  # seconds; covered once the history reaches back 4 + 0.9 x 8 s
FAST = LatencyProfile(prefill_s=0.002, prefill_per_token_s=0.0, per_token_s=0.001, output_tokens=(16, 16), jitter=0.1)


def settings(db: Path, url: str) -> Any:
    return load_settings(None, {
        "storage": {"url": f"sqlite:///{db}"},
        "infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
        "service": {"scrape_interval": "1s", "windows": ["4s"], "baseline_window": "8s",
                    "baseline_min_coverage": 0.9, "targets": [{"name": "sim", "url": url}]},
    })


async def constant_load(url: str, stop: asyncio.Event, rps: float = 50.0) -> None:
    """One 16-token completion every 1/rps seconds until `stop`, each request awaited before the end."""
    async with httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client, asyncio.TaskGroup() as group:
        payload = {"model": MODEL, "prompt": "word " * 8, "max_tokens": 16}
        loop = asyncio.get_running_loop()
        started, sent = loop.time(), 0
        async def one() -> None:
            # A keep-alive connection the server closes as the request goes out is a ReadError
            # before anything was processed (seen on a busy machine): sent again, as clients do.
            for attempt in range(3):
                try:
                    await client.post("/v1/completions", json=payload)
                    return
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    if attempt == 2:
                        raise

        while not stop.is_set():
            group.create_task(one())
            sent += 1
            await asyncio.sleep(max(0.0, started + sent / rps - loop.time()))


Seen = tuple[float, float | None, str, float]  # elapsed, ratio, baseline state, when the view was derived


class TokenLog:
    """The simulator's generated tokens as it produced them (its engine's clock: time.monotonic)."""

    def __init__(self, engine: SimulatedEngine) -> None:
        self.steps: list[tuple[float, int]] = []
        self.lock = threading.Lock()
        engine.add_observer(self._add)

    def _add(self, stats: IterationStats) -> None:
        with self.lock:
            self.steps.append((stats.now, stats.num_generation_tokens))

    def rate(self, start: float, end: float) -> float:
        with self.lock:
            return sum(n for t, n in self.steps if start < t <= end) / (end - start)

    def ratio(self, at: float, since: float) -> float:
        """rate(generation_tokens[4s]) / rate(generation_tokens[8s] offset 4s), in the simulator's truth,
        the baseline from `since` on where it reaches back further (the monitor's history starts there)."""
        baseline = self.rate(max(at - WINDOW - BASELINE, since), at - WINDOW)
        return self.rate(at - WINDOW, at) / baseline if baseline else math.nan  # (nan: no tokens to compare with)


def observe(monitor: Monitor) -> tuple[float | None, str, float]:
    """The ratio, the baseline's state, and the time the view was derived at (its clock: the
    monitor's `wall`, which the tests set to the simulator's, time.monotonic)."""
    stats = monitor.service.view.targets["sim"].stats.get((MODEL, "4s"))
    (row,) = monitor.service.status()
    ratio = stats.throughput_baseline_ratio if stats else None
    return ratio, row["baseline"].get(MODEL, {}).get("4s", ""), monitor.service.view.ts


async def cycles(monitor: Monitor, seconds: float) -> list[Seen]:
    """Collect once a second on the real clock; (elapsed, ratio, baseline state, when) after each,
    `when` the time the monitor evaluated its rates at (after the scrape: on a busy machine a
    cycle's scrape can start seconds after the cycle did)."""
    seen = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        tick = time.monotonic()
        await monitor.run_once()
        ratio, state, when = observe(monitor)
        seen.append((tick - started, ratio, state, when))
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    return seen


@pytest.mark.long
def test_ratio_is_absent_until_covered_then_about_one_and_survives_a_restart(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERMON_STORAGE__URL", raising=False)
    engine = SimulatedEngine(EngineConfig(deterministic=True, min_step_s=0.001), FAST)
    tokens = TokenLog(engine)
    with SimServer(engine) as server:
        config = settings(tmp_path / "history.db", server.metrics_url)

        async def run() -> tuple[list[Seen], list[Seen]]:
            stop = asyncio.Event()
            load = asyncio.create_task(constant_load(server.url, stop))
            try:
                first = Monitor(config, client=httpx.AsyncClient(trust_env=False), wall=time.monotonic)
                try:
                    warming = await _until_covered(first)
                finally:
                    await first.aclose()
                again = Monitor(config, client=httpx.AsyncClient(trust_env=False), wall=time.monotonic)
                try:
                    restarted = await cycles(again, WINDOW + 2.5)
                finally:
                    await again.aclose()
            finally:
                stop.set()
                await load  # every request answered: no socket left open
            return warming, restarted

        warming, restarted = asyncio.run(run())
    early = [seen for seen in warming if seen[0] < WINDOW + 0.9 * BASELINE - 1.0]
    assert early and all(ratio is None for _, ratio, _, _ in early), early  # never a guess before coverage
    warming_states = [state for _, _, state, _ in early if state]  # "" before the window has two scrapes
    assert warming_states and all(s.startswith("baseline warming up: ") and s.endswith(" of 8 s")
                                  for s in warming_states), early
    covered = [(ratio, state, at) for _, ratio, state, at in warming if ratio is not None]
    assert covered and covered[-1][1] == "ready"
    # The load's own ratio (about 1.0 on a quiet machine), not the 4-8x of a baseline that held a
    # fraction of its window; the monitor's rate() is extrapolated from 1-s scrapes, the truth not.
    ratio, _, at = covered[-1]
    truth = tokens.ratio(at, since=warming[0][3])
    assert ratio == pytest.approx(truth, rel=0.25), _story(warming, tokens)
    # Restarted on the same database: the baseline's history was reloaded, so it is ready as soon as
    # the window has two scrapes (the window's own rate then fills up, as Prometheus' would), not
    # WINDOW + 0.9 x BASELINE seconds later.
    # (Its value right after a restart is checked exactly, on a deterministic page, below.)
    states = [state for _, _, state, _ in restarted if state]
    assert states and set(states) == {"ready"}, restarted
    # The first cycle whose window has two scrapes has the ratio (the second cycle, or a later
    # one when a scrape ran late on a busy machine), long before a cold start would have it.
    first_t, first_ratio, _, _ = next(seen for seen in restarted if seen[2])
    assert first_ratio is not None and first_t < WINDOW + 0.9 * BASELINE - 1.0, restarted


def _story(seen: list[Seen], tokens: TokenLog) -> str:
    """Each cycle (when, the monitor's ratio, the truth's, the state) and the tokens made each second."""
    since = seen[0][3]
    lines = [f"{elapsed:6.2f} s  at {at - since:6.2f}  ratio {ratio!s:>20}  truth "
             f"{tokens.ratio(at, since) if ratio is not None else '-'!s:>20}  {state}"
             for elapsed, ratio, state, at in seen]
    end = seen[-1][3]
    per_second = [round(tokens.rate(since + s - 1, since + s)) for s in range(1, int(end - since) + 2)]
    return "\n".join([*lines, f"tokens/s from the first view on: {per_second}"])


def test_a_step_of_the_system_clock_neither_covers_a_baseline_nor_moves_its_ratio(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The monitor on its own clock (monitor/clock.py), the system clock stepped 6.4 s forward
    # 6 s in: on time.time() that made the 8 s baseline look covered at once and the ratio read
    # 3.8-7.4x at constant load (CI saw 4.97x). The page's counters grow linearly on the monotonic
    # clock, a constant rate however busy the machine is (the simulator's tokens/s swung 18-1,344
    # beside two CPU hogs, and a truth taken over the whole window from its token log is not what
    # 1-s scrapes see of such bursts). The truth: Prometheus' rate() of what each scrape was served,
    # at the moment (time.monotonic) it was served.
    monkeypatch.delenv("INFERMON_STORAGE__URL", raising=False)
    base = (FIXTURES / "sample_vllm_v1.prom").read_text()
    origin = time.monotonic()
    served: list[tuple[float, float]] = []  # (time.monotonic(), counters' factor) of each scrape

    def page(request: httpx.Request) -> httpx.Response:
        now = time.monotonic()
        served.append((now, 1 + (now - origin) / 10))
        return httpx.Response(200, text=grow(base, served[-1][1]))

    config = settings(tmp_path / "history.db", "http://sim/metrics")
    system = time.time

    async def run() -> tuple[list[Seen], float, dict[str, Any]]:
        monitor = Monitor(config, client=httpx.AsyncClient(transport=httpx.MockTransport(page)))
        assert isinstance(monitor.wall, SteadyClock)
        try:
            seen = await cycles(monitor, 6.0)
            monkeypatch.setattr(time, "time", lambda: system() + 6.4)  # every reader of the system clock
            seen += [(6.0 + t, *rest) for t, *rest in await _until_covered(monitor)]
            return seen, monitor.wall.offset, monitor.status()["clock"]
        finally:
            await monitor.aclose()

    with caplog.at_level(logging.WARNING, logger="monitor.clock"):
        seen, offset, clock = asyncio.run(run())
    assert clock == {"source": "steady", "system_clock_stepped_seconds": pytest.approx(6.4, abs=0.1)}
    # said in the log once, by the collection cycles themselves (no one read the status meanwhile)
    assert [r.getMessage()[:40] for r in caplog.records if r.name == "monitor.clock"] == [
        "the system clock was stepped by +6.4 s s"]
    on_monotonic = [(elapsed, ratio, state, at - offset) for elapsed, ratio, state, at in seen]
    story = "\n".join(f"{elapsed:6.2f} s  ratio {ratio}  truth {_served_ratio(served, at)}  {state}"
                      for elapsed, ratio, state, at in on_monotonic)
    early = [s for s in on_monotonic if s[0] < WINDOW + 0.9 * BASELINE - 1.0]
    assert early and all(ratio is None for _, ratio, _, _ in early), story
    covered = [(ratio, at) for _, ratio, _, at in on_monotonic if ratio is not None]
    assert covered, story
    for ratio, at in covered:
        assert ratio == pytest.approx(_served_ratio(served, at), rel=0.05), story


def _served_ratio(served: list[tuple[float, float]], at: float) -> float | None:
    """rate(c[4s]) / rate(c[8s] offset 4s) at `at` over the samples (when served, value), as Prometheus
    computes it (the counters are one factor times the page's: their ratio is the factor's)."""
    rates = []
    for start, end in ((at - WINDOW, at), (at - WINDOW - BASELINE, at - WINDOW)):
        inside = [(t, v) for t, v in served if start < t <= end]
        if len(inside) < 2:
            return None
        (first_t, first_v), (last_t, last_v) = inside[0], inside[-1]
        increase = extrapolate(last_v - first_v, first_t, last_t, first_v, len(inside), start, end)
        if increase is None:
            return None
        rates.append(increase / (end - start))
    return rates[0] / rates[1] if rates[1] else None


async def _until_covered(monitor: Monitor) -> list[Seen]:
    """Cycles until the ratio has been there for three scrapes in a row (bounded at 25 s)."""
    seen: list[Seen] = []
    started = time.monotonic()
    while time.monotonic() - started < 25:
        at = time.monotonic() - started
        seen += [(at + t, ratio, state, when) for t, ratio, state, when in await cycles(monitor, 0.5)]
        if len(seen) >= 3 and all(ratio is not None for _, ratio, _, _ in seen[-3:]):
            break
    return seen


def test_coverage_is_how_far_back_the_history_reaches() -> None:
    """Pure: 10 tokens/s throughout; the baseline is absent until the samples reach back 90 % of it."""
    store = SeriesStore(1000)

    def ratio_at(end: float) -> tuple[float | None, float | None]:
        rates = window_rates(store, end, Window("60s", 60.0), store, 600.0, min_coverage=0.9)[MODEL]
        return (rates.covered_generation / rates.baseline_generation if rates.baseline_generation else None,
                rates.baseline_coverage)

    labels = (("model_name", MODEL),)
    for ts in range(0, 700, 15):
        store.append(Snapshot(ts=1_000_000 + ts, counters={"generation_tokens": {MODEL: {labels: 10.0 * ts}}}))
    # 180 s in: the baseline (600 s before the window) holds 120 s of history: 20 %, no ratio.
    assert ratio_at(1_000_180) == (None, pytest.approx(0.2))
    # 600 s in: 540 s of 600 = exactly 90 %: a baseline. rate() over it is Prometheus' (no
    # extrapolation below a counter's zero), so at the threshold it reads up to 1/0.9 high ...
    ratio, coverage = ratio_at(1_000_600)
    assert coverage == pytest.approx(0.9) and ratio == pytest.approx(600 / 540)
    assert ratio_at(1_000_585)[0] is None  # 525 s of 600: not yet
    # ... and exactly 1.0 once the history reaches back over the whole baseline.
    assert ratio_at(1_000_690) == (pytest.approx(1.0), 1.0)


@pytest.mark.parametrize("seed", range(3))
def test_a_baseline_kept_one_window_back_reads_as_one_kept_two(seed: int) -> None:
    """The collector's baseline store keeps its rows one baseline window back (and the longest
    window), and only the throughput's counter two (`reach`): over hours of scrapes with outages,
    restarts, a model that comes late and one that leaves, every window's rates, baselines and
    coverage read from it equal, bit for bit, those read from a store that keeps everything two
    baseline windows back. An outage of a third of the baseline window is what tells them apart
    when the reach is not kept: the rows alone would say the history starts after it."""
    import random

    rng = random.Random(seed)
    interval, longest, baseline = 15.0, 300.0, 600.0
    full = SeriesStore(longest + 2 * baseline + interval)
    lean = SeriesStore(longest + baseline + interval, reach=("generation_tokens", longest + 2 * baseline + interval))
    windows = (Window("1m", 60.0), Window("5m", 300.0))
    les = (1.0, 10.0, 100.0, math.inf)
    models = ("a", "b", "c")
    totals = {model: [rng.uniform(0, 1e6), rng.uniform(0, 1e3), *([0.0] * len(les))] for model in models}
    away = dict.fromkeys(models, 0)
    held = 0
    for step in range(420):
        ts = round(1_800_000_000 + interval * step + rng.uniform(-0.3, 0.3), 3)
        counters: dict[str, dict[str, dict[Any, float]]] = {"generation_tokens": {}, "prefix_cache_hits": {}}
        buckets: dict[str, dict[str, dict[Any, float]]] = {"prompt_len": {}}
        for model in models:
            if (model == "c" and step < 150) or (model == "b" and step > 330):
                continue  # comes late; leaves
            if away[model]:
                away[model] -= 1
                continue
            if rng.random() < 0.01:
                away[model] = rng.choice((2, int(baseline / 3 / interval)))
            total = totals[model]
            if rng.random() < 0.02:
                total[:] = [0.0] * len(total)  # the engine restarted: its counters drop
            total[0] += rng.uniform(0, 900)
            total[1] += rng.uniform(0, 20)
            for i in range(len(les)):
                total[2 + i] += sum(rng.random() < 0.3 * (i + 1) for _ in range(3))
            labels = (("model_name", model),)
            counters["generation_tokens"][model] = {labels: total[0]}
            counters["prefix_cache_hits"][model] = {labels: total[1]}
            buckets["prompt_len"][model] = {(labels, le): total[2 + i] for i, le in enumerate(les)}
        snap = Snapshot(ts=ts, counters=counters, buckets=buckets)
        full.append(snap)
        lean.append(snap)
        for window in windows:
            got = window_rates(full, ts, window, lean, baseline, min_coverage=0.9)
            want = window_rates(full, ts, window, full, baseline, min_coverage=0.9)
            assert repr(got) == repr(want), (step, window.name)
            held += sum(rates.baseline_generation is not None for rates in want.values())
    assert held > 500  # the baselines were there most of the time, not absent throughout


def test_a_ten_model_targets_baseline_holds_its_samples_and_little_more() -> None:
    """At the shipped settings (15 s, 1m and 5m windows, 1h baseline) a ten-model target's baseline
    store, once full, holds at most a fifth more than the samples it must: its rates' (350 rows,
    1h5m of columns), and its throughput counter's two hours back. Kept two hours and grown by
    doubling, it held 512 rows by 512 columns: 2.6 times that."""
    collector = ServiceCollector(
        load_settings(None, {"service": {"targets": [{"name": "t", "url": "http://127.0.0.1:9/metrics"}]}}).service,
        httpx.AsyncClient(), HealthBook())
    state = collector.targets["t"]
    models = [f"model-{i}" for i in range(10)]
    les = (*(2.0**i for i in range(14)), math.inf)
    steps = int((300 + 2 * 3600) / 15) + 40
    for step in range(steps):
        counters: dict[str, dict[str, dict[Any, float]]] = {}
        for metric in BASELINE_COUNTERS:
            counters[metric] = {model: {(("model_name", model),): 7.0 * step} for model in models}
        buckets = {metric: {model: {((("model_name", model),), le): float(step * i) for i, le in enumerate(les)}
                            for model in models} for metric in LENGTH_HISTOGRAMS}
        collector.pipeline.remember(state, Snapshot(ts=1_800_000_000 + 15.0 * step, counters=counters, buckets=buckets))
    rows = len(models) * (len(BASELINE_COUNTERS) + len(LENGTH_HISTOGRAMS) * len(les))
    samples = (rows * ((300 + 3600) / 15 + 1) + len(models) * ((300 + 7200) / 15 + 1)) * 8
    assert state.baseline.nbytes() <= 1.2 * samples, (state.baseline.nbytes(), samples)
    reach = state.baseline.earliest("counter", "generation_tokens", 1_800_000_000 + 15.0 * (steps - 1) - 7200, 2e9)
    assert sorted(reach) == models and set(reach.values()) == {1_800_000_000 + 15.0 * (steps - 480)}


def test_a_restart_keeps_the_baseline_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counters growing linearly (a constant rate): covered after 1m + 0.9 x 2m; after a restart on the
    same database the ratio is back, exactly 1.0, once the window is full again -- not 3 minutes later."""
    monkeypatch.delenv("INFERMON_STORAGE__URL", raising=False)
    base = (FIXTURES / "sample_vllm_v1.prom").read_text()
    clock = [1_767_300_000.0]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=grow(base, 1 + (clock[0] - 1_767_300_000.0) / 150))

    config = load_settings(None, {
        "storage": {"url": f"sqlite:///{tmp_path / 'history.db'}"}, "infra": {"nvml": {"enabled": "false"}},
        "alerting": {"enabled": False},
        "service": {"scrape_interval": "15s", "windows": ["1m"], "baseline_window": "2m",
                    "targets": [{"name": "a", "url": "http://a/metrics"}]}})

    def ratio(monitor: Monitor) -> float | None:
        stats = monitor.service.view.targets["a"].stats.get((MODEL, "1m"))
        return stats.throughput_baseline_ratio if stats else None

    async def run(scrapes: int) -> list[float | None]:
        monitor = Monitor(config, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
                          wall=lambda: clock[0])
        seen = []
        try:
            for _ in range(scrapes):
                await monitor.run_once()
                seen.append(ratio(monitor))
                clock[0] += 15.0
        finally:
            await monitor.aclose()
        return seen

    first = asyncio.run(run(14))  # 0 .. 195 s: covered from 60 + 108 = 168 s (the 12th scrape, at 180 s)
    assert first[:12] == [None] * 12 and first[12:] == [pytest.approx(1.0), pytest.approx(1.0)]
    clock[0] += 30.0  # down for two scrape intervals
    again = asyncio.run(run(6))
    # The baseline is there from the second scrape on (a fresh monitor: 168 s later); the window's own
    # rate refills over one window, extrapolated as Prometheus' rate() is, then the ratio is exact.
    assert again[0] is None and all(r is not None for r in again[1:4]), again
    assert again[4:] == [pytest.approx(1.0, rel=1e-9), pytest.approx(1.0, rel=1e-9)]
