"""The generated recording rules: current, valid for promtool, covering every engine table name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from monitor.config import load_settings
from monitor.service.engines import ENGINES, spellings
from monitor.service.recording import rule_file, rule_file_text
from tests.conftest import require_binary

SHIPPED = Path(__file__).parents[2] / "deploy" / "prometheus" / "recording.yml"


def default_text() -> str:
    service = load_settings().service
    objectives = {"ttft": service.slo.ttft.seconds, "tpot": service.slo.tpot.seconds}
    return rule_file_text([w.text for w in service.windows], service.baseline_window.text, objectives)


def test_shipped_file_is_current() -> None:
    # Regenerate with: .venv/bin/infermon rules recording > deploy/prometheus/recording.yml
    assert SHIPPED.read_text() == default_text()


def test_cli_prints_the_same_and_takes_windows(tmp_path: Path) -> None:
    infermon = [sys.executable, "-m", "monitor.cli"]
    printed = subprocess.run([*infermon, "rules", "recording"], capture_output=True, text=True, check=True,
                             cwd=tmp_path).stdout
    assert printed == default_text()
    other = subprocess.run([*infermon, "rules", "recording", "--windows", "30s,2m"], capture_output=True, text=True,
                           check=True, cwd=tmp_path).stdout
    assert "name: inference-service-30s" in other and "name: inference-service-2m" in other
    assert "[1m]" not in other
    bad = subprocess.run([*infermon, "rules", "recording", "--windows", "soon"], capture_output=True, text=True,
                         check=False, cwd=tmp_path)
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    result = subprocess.run([promtool, "check", "rules", str(SHIPPED)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 378 rules found" in result.stdout


def test_every_name_of_every_engine_is_read_in_both_spellings() -> None:
    # Every name behind the service series (the length histograms feed the cost layer, which stays
    # in the monitor).
    text = SHIPPED.read_text()
    for spec in ENGINES:
        names = {s.sample for selectors in spec.counters.values() for s in selectors}
        names |= {f"{b}_bucket" for h in ("ttft", "tpot", "e2e", "queue") for b in spec.histograms.get(h, ())}
        names |= {c for gauge in spec.gauges.values() for c in gauge.candidates}
        for name in names:
            for spelled in spellings(name):
                assert spelled.replace(".", "\\.") in text or spelled in text, (spec.engine, spelled)


def test_every_window_has_the_service_series_per_target_and_fleet() -> None:
    groups = rule_file(["1m"], "1h", {"ttft": 0.2, "tpot": 0.05})["groups"]
    exported = {(r["record"], r.get("labels", {}).get("target") == "") for r in groups[0]["rules"]
                if not r["record"].startswith("inference:")}
    for name in ("inference_requests_per_second", "inference_request_error_ratio",
                 "inference_prompt_tokens_per_second", "inference_generation_tokens_per_second",
                 "inference_preemptions_per_second", "inference_throughput_baseline_ratio",
                 "inference_ttft_seconds", "inference_tpot_seconds", "inference_e2e_latency_seconds",
                 "inference_queue_time_seconds", "inference_slo_attainment_ratio",
                 "inference_prefix_cache_hit_ratio", "inference_prompt_seconds_per_token",
                 "inference_generation_seconds_per_token"):
        assert (name, False) in exported and (name, True) in exported, name
    gauges = {r["record"] for r in groups[1]["rules"]}
    assert gauges == {"inference_target_up", "inference_requests_running", "inference_requests_waiting",
                      "inference_kv_cache_usage_ratio", "inference_rank_requests_running",
                      "inference_rank_requests_waiting", "inference_rank_kv_cache_usage_ratio",
                      "inference_rank_imbalance_ratio", "inference_requests_waiting_by_reason",
                      "inference_engine_sleep_state", "inference_engines_sleeping",
                      "inference_spec_decode_engine_acceptance_length",
                      "inference_spec_decode_engine_acceptance_ratio",
                      # each KV offload tier's usage, from its used and capacity gauges
                      "inference_kv_tier_usage_ratio", "inference:kv_tier_used", "inference:kv_tier_capacity"}
