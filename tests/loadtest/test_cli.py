"""`infermon bench run` and `bench report` from the command line, against the simulator."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from monitor.cli import app
from monitor.sim import LatencyProfile
from tests.loadtest.conftest import H200_TRACE, MODEL

QUICK = LatencyProfile(prefill_s=0.02, prefill_per_token_s=0.0, per_token_s=0.004, output_tokens=(6, 6), jitter=0.1)


def test_run_writes_a_result_and_a_summary_then_a_self_contained_report(start_sim, tmp_path: Path) -> None:
    server = start_sim(QUICK)
    out = tmp_path / "r.json"
    run = CliRunner().invoke(app, [
        "bench", "run", "--target", server.url, "--model", MODEL, "--synthetic", "--concurrency", "1,3",
        "--duration", "600ms", "--repeats", "2", "--warmup", "3", "--gpu-replay", str(H200_TRACE),
        "--gpu-price", "3.5", "--precision", "bf16", "-o", str(out)], env={"COLUMNS": "200"})
    assert run.exit_code == 0, run.output
    assert "SYNTHETIC DATA" in run.output and "TTFT P99 ms" in run.output and "c=3" in run.output
    result = json.loads(out.read_text())
    assert result["synthetic"] is True and result["conditions"]["gpu"]["model"] == "NVIDIA H200"
    assert [len(level["repeats"]) for level in result["levels"]] == [2, 2]
    assert result["levels"][1]["summary"]["ttft_s"]["p99"]["n"] == 2
    assert result["conditions"]["tool"]["client"] == "stream"  # the bench's own client, by default

    html_path = tmp_path / "r.html"
    report = CliRunner().invoke(app, ["bench", "report", str(out), "-o", str(html_path)])
    assert report.exit_code == 0, report.output
    html = html_path.read_text()
    assert "Synthetic data" in html and "(mean tokens a request, the server&#x27;s usage)" in html
    assert "HTTP client stream" in html
    assert html.count("<svg") == 5 and "cache_config_info" in html and "NVIDIA H200" in html
    # Self-contained: nothing fetched (no src/href at all, no url() in the CSS).
    assert not re.search(r"\b(src|href)=|url\(|<script", html)


def test_bad_options_fail_before_any_load(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["bench", "run", "--target", "http://127.0.0.1:9", "--model", MODEL]
    no_data = runner.invoke(app, base)
    assert no_data.exit_code == 2 and "--synthetic" in no_data.output
    both = runner.invoke(app, [*base, "--synthetic", "--concurrency", "2", "--rate", "3"])
    assert both.exit_code == 2 and "not both" in both.output
    (tmp_path / "bad.jsonl").write_text("nope\n")
    bad = runner.invoke(app, [*base, "--dataset", str(tmp_path / "bad.jsonl")])
    assert bad.exit_code == 2 and "bad.jsonl:1: not a JSON line" in bad.output
    duration = runner.invoke(app, [*base, "--synthetic", "--duration", "soon"])
    assert duration.exit_code == 2 and "--duration: not a duration" in duration.output
    client = runner.invoke(app, [*base, "--synthetic", "--client", "aiohttp"])
    assert client.exit_code == 2 and "stream, openai" in client.output
