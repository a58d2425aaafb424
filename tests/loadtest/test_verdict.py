"""Whether a run may be believed: a run whose requests failed exits 1, loudly; two sessions whose
client machine was loaded differently are refused; an A/B run alternates its targets' windows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.loadtest.result import write_result
from monitor.loadtest.verdict import clients, drift, failures, other_load
from monitor.ports import free_port
from monitor.sim import LatencyProfile
from tests.loadtest.conftest import MODEL

QUICK = LatencyProfile(prefill_s=0.02, prefill_per_token_s=0.0, per_token_s=0.004, output_tokens=(6, 6), jitter=0.0)


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, ["bench", "run", "--model", MODEL, "--synthetic", "--gpu", "none", *args],
                              env={"COLUMNS": "200"})


def test_a_mistyped_port_fails_the_run_at_the_warm_up_and_keeps_the_result(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run = _run("--target", closed, "--concurrency", "2,4", "--duration", "5s", "--repeats", "3", "--warmup", "3",
               "-o", str(out))
    assert run.exit_code == 1, run.output
    assert "RUN FAILED" in run.output and "every one of the 3 requests of the warm-up failed" in run.output
    assert "refused" in run.output
    result = json.loads(out.read_text())  # the conditions are kept: the run says why it stopped
    assert result["stopped"].startswith("every one of the 3 requests of the warm-up failed (refused: ")
    assert [level["repeats"] for level in result["levels"]] == [[], []]  # no 5 s window was spent on it


def test_without_a_warm_up_the_first_window_that_fails_entirely_stops_the_run(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    run = _run("--target", f"http://127.0.0.1:{free_port()}", "--concurrency", "2,4", "--duration", "300ms",
               "--warmup", "0", "-o", str(out))
    assert run.exit_code == 1, run.output
    result = json.loads(out.read_text())
    first, second = result["levels"]
    assert len(first["repeats"]) == 1 and second["repeats"] == []
    assert first["repeats"][0]["failed"] == first["repeats"][0]["requests"] > 0
    assert "c=2 run 1:" in run.output and "(100%, more than 5%)" in run.output


def test_a_level_over_the_failure_share_fails_the_run_and_the_limit_is_an_option(start_sim, tmp_path: Path) -> None:
    server = start_sim(QUICK)
    server.sim.inject("error_burst", 0.3)  # three requests in ten answer HTTP 500
    args = ["--target", server.url, "--concurrency", "2", "--duration", "600ms", "--warmup", "0", "--repeats", "1"]
    strict = _run(*args, "-o", str(tmp_path / "a.json"))
    assert strict.exit_code == 1, strict.output
    assert "RUN FAILED: c=2 run 1:" in strict.output and "http_5xx: HTTP 500" in strict.output
    lenient = _run(*args, "--max-failed", "90%", "-o", str(tmp_path / "b.json"))
    assert lenient.exit_code == 0, lenient.output
    window = json.loads((tmp_path / "b.json").read_text())["levels"][0]["repeats"][0]
    assert 0 < window["failed"] < window["requests"]
    assert _run(*args, "--max-failed", "lots").exit_code == 2


def test_failures_reads_every_window() -> None:
    level = {"level": {"label": "c=8"}, "repeats": [
        {"requests": 100, "failed": 5, "failure_reasons": {}},
        {"requests": 100, "failed": 6, "failure_reasons": {"timeout": ["no complete answer within 10s"]}}]}
    assert failures({"levels": [level]}, 0.05) == [
        "c=8 run 2: 6 of 100 requests failed (6%, more than 5%): timeout: no complete answer within 10s"]
    assert failures({"levels": [level]}, 0.10) == []


def _with_load(busy: float, own: float, cpus: int = 4) -> dict[str, Any]:
    window = {"client": {"machine_busy_ratio": busy, "client_cpu_ratio": own, "cpu_count": cpus}}
    return {"levels": [{"level": {"label": "c=1"}, "repeats": [window, window]}]}


def test_drift_is_the_other_load_on_the_client_machine() -> None:
    # Busy 40 % of 4 CPUs, 0.4 CPU of it the bench itself: the others used 30 %.
    assert other_load(_with_load(0.40, 0.4)) == pytest.approx(0.30)
    assert drift(_with_load(0.40, 0.4), _with_load(0.45, 0.6)) == []
    (line,) = drift(_with_load(0.10, 0.4), _with_load(0.80, 0.4))
    assert "moved from 0% to 70% of its CPUs" in line
    assert drift({"levels": [{"repeats": []}]}, _with_load(0.9, 0.1)) == []  # not recorded: nothing to say


def test_compare_refuses_two_sessions_on_a_differently_loaded_machine(tmp_path: Path) -> None:
    results = []
    for name, busy in (("quiet", 0.1), ("busy", 0.9)):
        result = _with_load(busy, 0.2)
        result.update({"schema": "infermon-bench", "schema_version": 1, "conditions": {}})
        result["levels"][0]["level"] = {"kind": "concurrency", "value": 1, "label": "c=1"}
        result["levels"][0]["summary"] = {"output_tokens_per_s": {"mean": 100.0, "stdev": 1.0, "n": 2}}
        write_result(result, tmp_path / f"{name}.json")
        results.append(str(tmp_path / f"{name}.json"))
    refused = CliRunner().invoke(app, ["bench", "compare", *results])
    assert refused.exit_code == 2 and "other load moved from 5% to 85%" in refused.output
    assert CliRunner().invoke(app, ["bench", "compare", *results, "--max-drift", "90%"]).exit_code == 0
    assert CliRunner().invoke(app, ["bench", "compare", *results, "--force"]).exit_code == 0


def test_compare_refuses_two_results_measured_through_different_clients(tmp_path: Path) -> None:
    results = []
    for name, client in (("sdk", None), ("stream", "stream")):  # a result from before --client was the SDK's
        result = _with_load(0.2, 0.2)
        tool = {"name": "infermon bench"} if client is None else {"name": "infermon bench", "client": client}
        result.update({"schema": "infermon-bench", "schema_version": 1, "conditions": {"tool": tool}})
        result["levels"][0]["level"] = {"kind": "concurrency", "value": 1, "label": "c=1"}
        result["levels"][0]["summary"] = {"output_tokens_per_s": {"mean": 100.0, "stdev": 1.0, "n": 2}}
        write_result(result, tmp_path / f"{name}.json")
        results.append(str(tmp_path / f"{name}.json"))
    assert clients(json.loads(Path(results[0]).read_text()), json.loads(Path(results[0]).read_text())) == []
    refused = CliRunner().invoke(app, ["bench", "compare", *results])
    assert refused.exit_code == 2 and "HTTP client: openai vs stream" in refused.output
    assert CliRunner().invoke(app, ["bench", "compare", *results, "--force"]).exit_code == 0


def test_an_ab_run_alternates_its_targets_and_compares_them(start_sim, tmp_path: Path) -> None:
    profile = LatencyProfile(prefill_s=0.3, prefill_per_token_s=0.0, per_token_s=0.05, output_tokens=(4, 4),
                             jitter=0.0)
    a, b = start_sim(profile), start_sim(profile, time_scale=2.0)  # B: every delay twice as long
    out_a, out_b = tmp_path / "a.json", tmp_path / "b.json"
    run = _run("--target", a.url, "--target-b", b.url, "--concurrency", "4", "--duration", "1s", "--repeats", "2",
               "--warmup", "2", "--threshold", "15%", "-o", str(out_a), "--output-b", str(out_b))
    assert run.exit_code == 1, run.output  # B is slower: a regression of B against A
    assert "REGRESSION" in run.output and "a.json -> b.json" in run.output
    result_a, result_b = json.loads(out_a.read_text()), json.loads(out_b.read_text())
    assert result_a["target"] == a.url and result_b["target"] == b.url
    (a1, a2), (b1, b2) = (r["levels"][0]["repeats"] for r in (result_a, result_b))
    # A B, then B A: a drift of the machine over the session weighs on both alike.
    assert a1["started"] < b1["started"] < b2["started"] < a2["started"]
