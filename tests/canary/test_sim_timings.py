"""Through the real openai SDK against the simulator on loopback: the canary measures the delays
the simulator was told to use, and a slow path in front of it shows as the TTFT gap.

Tolerances. The simulator produces token k at PREFILL_S + (k-1) * PER_TOKEN_S after arrival in
its model time; the client sees each token later by the loopback round trip plus however late
the two event loops (the simulator's thread, the probe's) wake up. That lateness never makes a
token early, so TTFT >= PREFILL_S, and on this 2-core machine shared with other test runs it
stays well under TTFT_NOISE_S (typically 2-10 ms). TPOT is the gap between the first and the
last token divided by 31 gaps: the wake-up noise at the two ends is divided by 31 too, hence
TPOT_NOISE_S. Each check takes the median of three probes after a warm-up one (the first
request also pays for the TCP connection and the SDK's first-call imports).
"""

from __future__ import annotations

import asyncio
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from monitor.canary.outcome import ProbeResult
from monitor.catalog import CATALOG
from monitor.runtime import Monitor
from tests.canary.conftest import (
    MAX_TOKENS,
    MODEL,
    PER_TOKEN_S,
    PREFILL_S,
    canary_monitor,
    exact_profile,
    probe,
    samples,
)
from tests.support.forwarder import Forwarder
from tests.support.golden import assert_promtool_accepts, emitted_families

pytestmark = pytest.mark.alone  # client timings held to 50 ms (TTFT) and 3 ms (TPOT): run with no neighbours

TTFT_NOISE_S = 0.05
TPOT_NOISE_S = 0.003
PATH_DELAY_S = 0.1  # the slow path: each direction, so the first token comes 2 x later


async def _probe_times(monitor: Monitor, name: str, times: int) -> list[ProbeResult]:
    results = []
    for _ in range(times):
        result = await monitor.canary.probe_once(name)
        assert result is not None
        results.append(result)
    return results


def _median(results: list[ProbeResult], attribute: str) -> float:
    values: list[Any] = [getattr(r, attribute) for r in results]
    assert None not in values
    return float(statistics.median(values))


def test_measured_ttft_and_tpot_are_the_simulators_delays(start_sim) -> None:
    sim = start_sim()
    monitor = canary_monitor([probe("direct", f"{sim.url}/v1")])

    async def run() -> list[ProbeResult]:
        try:
            await _probe_times(monitor, "direct", 1)  # warm-up: connection, SDK imports
            return await _probe_times(monitor, "direct", 3)
        finally:
            await monitor.aclose()

    results = asyncio.run(run())
    assert {r.outcome for r in results} == {"ok"}
    assert {(r.output_tokens, r.tokens_from) for r in results} == {(MAX_TOKENS, "usage")}
    ttft, tpot, e2e = (_median(results, a) for a in ("ttft_seconds", "tpot_seconds", "e2e_seconds"))
    assert PREFILL_S <= ttft < PREFILL_S + TTFT_NOISE_S
    assert abs(tpot - PER_TOKEN_S) < TPOT_NOISE_S
    told_e2e = PREFILL_S + (MAX_TOKENS - 1) * PER_TOKEN_S
    assert told_e2e <= e2e < told_e2e + TTFT_NOISE_S


def test_slow_path_shows_as_the_gap_to_the_engines_ttft(start_sim, tmp_path: Path) -> None:
    # Told TTFT 0.175 s: every engine observation falls in vLLM's (0.1, 0.25] bucket, whose
    # histogram_quantile P50 is 0.175 however the observations spread inside it.
    sim = start_sim(exact_profile(0.175))
    with Forwarder(sim.port, delay_s=PATH_DELAY_S) as path:
        monitor = canary_monitor(
            [probe("direct", f"{sim.url}/v1", target="sim"),
             probe("slow-path", f"http://127.0.0.1:{path.port}/v1", target="sim")],
            targets={"sim": sim.metrics_url},
        )

        async def run() -> tuple[list[ProbeResult], list[ProbeResult], bytes]:
            try:
                await monitor.service.collect()  # the first scrape: rates need two
                direct = await _probe_times(monitor, "direct", 2)
                slow = await _probe_times(monitor, "slow-path", 2)
                await monitor.service.collect()
                return direct, slow, monitor.metrics_text()
            finally:
                await monitor.aclose()

        direct, slow, page = asyncio.run(run())
        sent = bytes(path.received)
    exported = samples(page)

    def value(name: str, **labels: str) -> float:
        return exported[(name, tuple(sorted(labels.items())))]

    engine_p50 = value("inference_ttft_seconds", target="sim", model=MODEL, window="1m", quantile="0.5")
    assert engine_p50 == 0.175
    for name, results in (("direct", direct), ("slow-path", slow)):
        labels = {"probe": name, "model": MODEL}
        assert value("inference_canary_up", **labels) == 1.0
        client_ttft = value("inference_canary_ttft_seconds", **labels)
        assert client_ttft == results[-1].ttft_seconds
        # The gap is exactly the definition: client TTFT - the engine's exported P50.
        assert value("inference_canary_ttft_gap_seconds", **labels, target="sim") == client_ttft - engine_p50
    direct_gap = value("inference_canary_ttft_gap_seconds", probe="direct", model=MODEL, target="sim")
    slow_gap = value("inference_canary_ttft_gap_seconds", probe="slow-path", model=MODEL, target="sim")
    assert 0.0 <= direct_gap < TTFT_NOISE_S
    assert 2 * PATH_DELAY_S <= slow_gap < 2 * PATH_DELAY_S + TTFT_NOISE_S
    # The delay line adds to the first token only: the stream keeps its pace.
    assert abs(_median(slow, "tpot_seconds") - PER_TOKEN_S) < TPOT_NOISE_S
    # Operators can leave the canary out of usage reports: the `user` field and the header.
    assert re.search(rb'"user":\s*"infermon-canary"', sent)
    assert re.search(rb"(?im)^x-infermon-canary: slow-path\r$", sent)
    # The page: every canary family of the catalog, in a shape promtool accepts.
    (tmp_path / "metrics.prom").write_bytes(page)
    assert_promtool_accepts(tmp_path / "metrics.prom")
    canary = {name for name in emitted_families(tmp_path / "metrics.prom") if name.startswith("inference_canary")}
    assert canary == {name for name, d in CATALOG.items() if d.layer == "canary"}

