"""The operators' hypotheses with `infermon bench` (#45), against the simulator on loopback: the
long-context scenario with a host KV tier off, on, and on a slow link, compared in words; the MoE
scenario's balancedness and a P/D split's transfer share, read from the engine page per level."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.config import CostSettings
from monitor.cost.prices import PriceBook
from monitor.loadtest.data import draw_requests, synthetic_dataset
from monitor.loadtest.hypotheses import level_lines, parse_budget, swap_back, tiering_lines
from monitor.loadtest.load import Level
from monitor.loadtest.report import render_report
from monitor.loadtest.result import write_result
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.scenario import BUILT_IN, RequestClass, Scenario, load_scenario
from monitor.sim import DEFAULT_MODEL, LatencyProfile
from monitor.sim.tiers import HostTier, MoeProfile, PdSplit, prefix_key

# Alone (tests/conftest.py): TTFT on vs off is the client's measurement.
pytestmark = pytest.mark.alone

# The long-context scenario's shape, cut to seconds: two sessions per class, short answers.
LONG = Scenario("long-context", tuple(RequestClass(c.name, c.share, c.input_tokens, 4)
                                      for c in BUILT_IN["long-context"].classes), (4,), sessions=2)
QUICK = LatencyProfile(output_tokens=(4, 4), per_token_s=0.005, prefill_per_token_s=0.00003)  # a 32k prompt: ~0.55 s


def _bench(url: str, scenario: Scenario, level: int = 4, warmup: int = 16) -> dict[str, Any]:
    # The warm-up visits the sessions first (their first turn computes the whole prompt in every run).
    config = BenchConfig(target=url, model=DEFAULT_MODEL, scenario=scenario, dataset=synthetic_dataset(scenario),
                         levels=[Level("concurrency", level)], duration_s=2.0, repeats=1, warmup=warmup)
    return asyncio.run(run_bench(config, None, PriceBook(CostSettings())))


def test_the_built_in_scenarios_say_what_they_test() -> None:
    long = load_scenario("long-context")
    assert long.sessions == 24 and {c.input_tokens for c in long.classes} == {8000, 16000, 32000}
    assert long.describe()["sessions"] == 24 and "sessions" not in load_scenario("chat").describe()
    assert load_scenario("moe").classes[0].input_tokens == 200
    assert parse_budget("50ms") == 0.05 and parse_budget("0.2s") == 0.2
    with pytest.raises(ValueError, match="duration"):
        parse_budget("fast")


def test_a_session_revisits_its_prefix_and_only_its_turn_is_new() -> None:
    drawn = draw_requests(synthetic_dataset(LONG), LONG, 40)[:40]
    # The simulator knows a session by its prompt's first words, as a prefix cache by its first blocks.
    assert len({prefix_key(r.messages[0]["content"]) for r in drawn}) <= 2 * len(LONG.classes)
    assert len({r.messages[0]["content"] for r in drawn}) == 40  # every request its own turn


def test_tiering_on_vs_off_answers_the_hypothesis_and_a_slow_tier_breaks_it(start_sim, tmp_path: Path) -> None:
    off = _bench(start_sim(QUICK, page="sglang").url, LONG)
    on = _bench(start_sim(QUICK, page="sglang", host_tier=HostTier()).url, LONG)
    slow_server = start_sim(QUICK, page="sglang", host_tier=HostTier())
    slow_server.sim.inject("slow_kv_tier", 20.0)
    slow = _bench(slow_server.url, LONG)

    assert swap_back(off["levels"][0]) is None  # no tier, no swap-back figures: nothing guessed
    tier, p99, what = swap_back(on["levels"][0]) or ("", 0.0, "")
    # The engine's own histogram: a 16k-word session over a 50 GB/s link is ~43 ms, inside SGLang's 1 ms-1 s.
    assert (tier, what) == ("host", "P99") and 0.005 < p99 < 0.05
    slow_p99 = (swap_back(slow["levels"][0]) or ("", 0.0, ""))[1]
    assert slow_p99 > 0.05 and slow_p99 > 5 * p99
    held = tiering_lines(off, on, names=("off.json", "on.json"))
    assert held[0].startswith("KV tiering hypothesis (on.json ran with tiering), swap-back budget 50 ms")
    assert "< 50 ms budget (host tier); TTFT P99 -" in held[1] and held[1].endswith("the hypothesis holds"), held
    broken = tiering_lines(slow, off, names=("slow.json", "off.json"))  # either order
    assert ">= 50 ms budget" in broken[1] and broken[1].endswith("fails: the swap-back is over budget"), broken
    assert level_lines(on)[0].startswith("c=4: swap-back P99 ")
    assert "KV tiers, P/D, MoE" in render_report(on) and "KV tiers, P/D, MoE" not in render_report(off)

    # The same answer from `infermon bench compare`, with the budget it is given.
    for name, result in (("off", off), ("on", on)):
        write_result(result, tmp_path / f"{name}.json")
    out = CliRunner().invoke(app, ["bench", "compare", str(tmp_path / "off.json"), str(tmp_path / "on.json"),
                                   "--max-drift", "100%", "--force", "--threshold", "500%"], env={"COLUMNS": "200"})
    assert "the hypothesis holds" in out.output, out.output
    strict = CliRunner().invoke(app, ["bench", "compare", str(tmp_path / "off.json"), str(tmp_path / "on.json"),
                                      "--max-drift", "100%", "--force", "--threshold", "500%",
                                      "--swap-back-budget", "1ms"], env={"COLUMNS": "200"})
    assert "swap-back is over budget" in strict.output, strict.output


def test_the_moe_scenario_records_the_balancedness_and_a_pd_split_its_share(start_sim) -> None:
    moe = start_sim(QUICK, page="sglang", moe=MoeProfile())
    healthy = _bench(moe.url, BUILT_IN["moe"], warmup=2)
    moe.sim.inject("moe_imbalance", 0.5)
    skewed = _bench(moe.url, BUILT_IN["moe"], warmup=2)
    [line] = level_lines(healthy)
    balance = healthy["levels"][0]["summary"]["engine"]["moe_balancedness_ratio"]["mean"]
    assert abs(balance - MoeProfile().balancedness) <= MoeProfile().jitter and f"MoE balancedness {balance:.2f}" in line
    assert skewed["levels"][0]["summary"]["engine"]["moe_balancedness_ratio"]["mean"] < 0.6 * balance + 0.05

    pd = start_sim(QUICK, page="sglang", pd=PdSplit())
    pd.sim.inject("pd_transfer_slow", 30.0)
    result = _bench(pd.url, BUILT_IN["chat"], warmup=2)
    engine = result["levels"][0]["summary"]["engine"]["pd"]
    assert engine["transfer_ttft_share_ratio"]["mean"] > 0.3 and engine["transfer_s"]["p99"]["mean"] > 0
    assert ">= 30 % limit" in level_lines(result)[0]
