"""What a run served, not only what it asked: the per-request lengths the server counted (its
`usage`) in the conditions, labelled against the client's estimate, and `compare`'s "same
workload" test on them; the levels that ran, not the scenario's defaults."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.loadtest.conditions import differences
from monitor.loadtest.load import Level
from monitor.loadtest.report import render_report
from monitor.loadtest.result import write_result
from monitor.loadtest.stats import CHUNKS_OUTPUT, USAGE_OUTPUT, Sample, ServedLengths, distribution
from monitor.loadtest.summary import lengths_line
from monitor.sim import LatencyProfile
from monitor.sim.stats import IterationStats
from tests.loadtest.conftest import MODEL, bench

# Six tokens an answer whatever max_tokens asks (the chat scenario asks 100); the simulator counts a
# prompt's words as its tokens, where the client estimates four characters a token.
SIX = LatencyProfile(prefill_s=0.01, prefill_per_token_s=0.0, per_token_s=0.002, output_tokens=(6, 6), jitter=0.0)


def test_the_conditions_record_what_the_server_served_beside_what_was_asked(start_sim, prompts: Path) -> None:
    server = start_sim(SIX)
    counted: list[tuple[int, int]] = []  # the engine's own count of each finished request
    measuring = False

    def observe(stats: IterationStats) -> None:
        if measuring:
            counted.extend((f.num_prompt_tokens, f.num_generation_tokens) for f in stats.finished)

    def progress(phase: str, label: str, done: float, finished: int) -> None:
        nonlocal measuring
        measuring = measuring or phase == "measure"

    server.sim.add_observer(observe)
    result = bench(server.url, prompts, levels=[Level("concurrency", 2)], duration_s=1.0, warmup=2,
                   progress=progress)
    work = result["conditions"]["workload"]
    served = work["served"]
    # Asked: the client's estimate and max_tokens, labelled as such ...
    assert work["lengths"]["output_tokens"]["mean"] == 100
    assert work["lengths_from"] == {"input_tokens": "estimated: 4 characters a token",
                                    "output_tokens": "asked: max_tokens"}
    # ... served: every measured request's own count, the distribution the engine itself saw.
    assert served["requests"] == len(counted) == result["levels"][0]["repeats"][0]["requests"] > 0
    assert served["input_tokens"] == distribution([p for p, _ in counted])
    assert served["output_tokens"] == distribution([g for _, g in counted])
    assert served["output_tokens"]["p99"] == 6
    assert (served["input_from"], served["output_from"]) == ("usage.prompt_tokens", USAGE_OUTPUT)
    assert served["input_tokens"]["mean"] != work["lengths"]["input_tokens"]["mean"]  # words are not 4 characters
    assert "served" in lengths_line(work) and " 6 out (the server's usage)" in lengths_line(work)
    # The simulator has no /tokenize: the input lengths stay the estimate, and the report says why.
    assert work["lengths_exact"] == {"error": "tokenize: HTTP 404"}
    html = render_report(result)
    assert "<th>input lengths served</th><td>mean " in html and "usage.prompt_tokens" in html
    assert "not counted: tokenize: HTTP 404" in html


def test_an_answer_without_usage_is_counted_by_its_chunks_and_labelled_an_estimate() -> None:
    lengths = ServedLengths()
    ok = {"sent_s": 0.0, "ok": True, "outcome": "ok", "ttft_s": 0.1, "tpot_s": 0.01, "e2e_s": 0.2}
    lengths.add([Sample(**ok, output_tokens=7, prompt_tokens=None, tokens_from="chunks"),
                 Sample(**ok, output_tokens=9, prompt_tokens=None, tokens_from="chunks"),
                 Sample(**{**ok, "ok": False, "outcome": "timeout"}, output_tokens=None, prompt_tokens=None)])
    figures = lengths.figures()
    assert figures["requests"] == 2 and figures["output_tokens"]["mean"] == 8
    assert figures["output_from"] == CHUNKS_OUTPUT and "estimate" in CHUNKS_OUTPUT
    assert figures["input_from"] is None and figures["input_without_usage"] == 2
    assert figures["input_tokens"]["mean"] is None
    work = {"lengths": {"input_tokens": {"mean": 200}, "output_tokens": {"mean": 100}}, "served": figures}
    assert "an estimate" in lengths_line(work)


def _conditions(asked_in: float, served_in: float | None, served_out: float | None = 49.0) -> dict[str, Any]:
    served = None if served_in is None else {"input_tokens": {"mean": float(served_in)},
                                             "output_tokens": {"mean": served_out}}
    return {"workload": {"lengths": {"input_tokens": {"mean": float(asked_in)}, "output_tokens": {"mean": 100.0}},
                         "served": served, "levels": [{"kind": "concurrency", "value": 4, "label": "c=4"}]},
            "gpu": {}, "server": {"engine": "llamacpp", "config": {"props": {"total_slots": "2", "n_ctx": "4096"}}},
            "user": {}}


def test_compare_judges_the_same_workload_by_the_lengths_served() -> None:
    # The same prompts asked of a server whose template or tokenizer makes them 2.7x longer: not the same workload.
    assert differences(_conditions(201, 201), _conditions(201, 534)) == [
        "input-length distribution (served, the server's usage): mean 201.0 vs 534.0 tokens"]
    # Different estimates, the same tokens served: the same workload.
    assert differences(_conditions(150, 534), _conditions(201, 534)) == []
    # A result without served lengths (written before they were kept): the asked ones, said so.
    assert differences(_conditions(150, None), _conditions(201, 534)) == [
        "input-length distribution (asked, estimated): mean 150.0 vs 201.0 tokens"]


def test_the_refusal_names_each_differing_variable_readably_on_its_own_line(tmp_path: Path) -> None:
    a = {"schema": "infermon-bench", "schema_version": 1, "conditions": _conditions(201, 534),
         "levels": [{"level": {"kind": "concurrency", "value": 4, "label": "c=4"}, "summary": {}}]}
    b = copy.deepcopy(a)
    b["conditions"]["server"]["config"]["props"]["total_slots"] = "4"
    b["conditions"]["workload"]["levels"] = [{"kind": "concurrency", "value": 8, "label": "c=8"}]
    b["conditions"]["workload"]["served"]["output_tokens"]["mean"] = 100.0
    write_result(a, tmp_path / "np2.json")
    write_result(b, tmp_path / "np4.json")
    refused = CliRunner().invoke(app, ["bench", "compare", str(tmp_path / "np2.json"), str(tmp_path / "np4.json")],
                                 env={"COLUMNS": "80"})
    assert refused.exit_code == 2
    assert refused.output == (
        "not comparable: np2.json and np4.json differ in\n"
        "  - output-length distribution (served, the server's usage): mean 49.0 vs 100.0 tokens\n"
        "  - concurrency: c=4 vs c=8\n"
        "  - framework configuration: props: total_slots: 2 vs 4\n"
        "(--force compares anyway)\n")


def test_a_result_records_the_levels_that_ran_not_the_scenarios_defaults(start_sim, prompts: Path) -> None:
    server = start_sim(SIX)
    result = bench(server.url, prompts, levels=[Level("concurrency", 3)], duration_s=0.5, warmup=1)
    work = result["conditions"]["workload"]
    assert [level["label"] for level in work["levels"]] == ["c=3"]
    assert work["scenario"]["name"] == "chat" and "concurrency" not in work["scenario"]
    assert "[1, 8, 32, 128]" not in str(result)


@pytest.mark.parametrize("columns", ["80", "200"])
def test_the_summary_is_whole_at_80_columns_and_in_a_ci_log(start_sim, tmp_path: Path, columns: str) -> None:
    server = start_sim(SIX)
    out = tmp_path / "r.json"
    # CliRunner is not a TTY: what a CI log gets.
    run = CliRunner().invoke(app, [
        "bench", "run", "--target", server.url, "--model", MODEL, "--synthetic", "--concurrency", "1,2,3,4,5",
        "--duration", "300ms", "--repeats", "2", "--warmup", "1", "--gpu", "none", "-o", str(out)],
        env={"COLUMNS": columns})
    assert run.exit_code == 0, run.output
    assert "…" not in run.output
    width = int(columns)
    ours = [line for line in run.output.splitlines() if not line.startswith(("result written", "warm-up", "c="))]
    assert max(len(line) for line in ours) <= width
    for label in ("c=1", "c=2", "c=3", "c=4", "c=5"):
        assert label in run.output
    # every figure's name whole, and a measured value next to it
    for name in ("TTFT P99 ms", "engine TTFT P99 ms", "client CPU ms/req", "out tok/s"):
        assert any(line.startswith(name) or f" {name} " in line for line in run.output.splitlines()), name
    assert "not measured: GPU util %" in run.output
