"""bench/gpu_check.py without a GPU: its verdict on the real H200 recording, and its plumbing.

The device run (torch load + real NVML) is for a machine with a GPU; here the same logic runs
on the recording through the monitor's replay source, sped up, and the load subprocess runs
dry against a replayed pynvml, so a bug in either shows before device time is spent on it.
"""

from __future__ import annotations

import json
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.infra.reading import CLOCK_EVENT_REASONS
from monitor.infra.replay import ReplayNvml
from tests.infra.fakes import TRACE_FILE, h200_trace
from tests.support import gpu_check

PHASES = ["idle", "burn", "memfill", "duty30", "idle2"]


def failed(report: dict[str, Any]) -> list[str]:
    return [a["name"] for a in report["assertions"] if not a["ok"]]


def test_the_h200_recording_passes_every_assertion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # ~10 s: the 101 s recording at 10x, one tick per recorded second.
    assert gpu_check.main(["--replay", str(TRACE_FILE), "--speed", "10", "--out", str(tmp_path)]) == 0

    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["ok"] is True and failed(report) == []
    assert report["mode"] == "replay"
    assert report["gpu"]["model"] == "NVIDIA H200"
    assert [p["name"] for p in report["phases"]] == PHASES
    names = {a["name"] for a in report["assertions"]}
    for rule in ("burn: utilization > 0.9", "burn: power / limit > 0.8", "memfill: memory used ratio > 0.9",
                 "duty30: utilization 0.2..0.4", "idle2: utilization < 0.05",
                 "exported utilization_ratio equals NVML's", "exported power_watts equals NVML's",
                 "exported memory_used_bytes equals NVML's", "exported clock_event_reasons equals NVML's"):
        assert rule in names
    # Every phase was seen for most of its length, side by side.
    ticks = report["ticks"]
    assert len(ticks) >= 90
    for phase in report["phases"]:
        steady = [t for t in ticks if t["phase"] == phase["name"] and t["steady"]]
        assert len(steady) >= 0.6 * (phase["end"] - phase["start"] - 3), phase
    burn = next(t for t in ticks if t["phase"] == "burn" and t["steady"])
    assert burn["nvml_before"]["util_gpu_pct"] >= 99 and burn["exported"]["values"]["utilization_ratio"] >= 0.99
    assert burn["exported"]["reasons"]["sw_power_cap"] == 1.0
    assert report["timings"]["collect_ms"]["n"] == len(ticks)

    # A whole /metrics page from the burn phase, as Prometheus would read it.
    page = (tmp_path / "metrics_burn.prom").read_text()
    values = {(s.name, s.labels.get("gpu")): s.value
              for f in text_string_to_metric_families(page) for s in f.samples}
    assert values[("inference_gpu_utilization_ratio", "0")] > 0.9
    assert values[("inference_gpu_power_watts", "0")] / values[("inference_gpu_power_limit_watts", "0")] > 0.8
    assert "OK: 23/23 assertions pass" in capsys.readouterr().out


def test_a_late_collection_skips_no_record_of_the_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A starved machine: some collections take 0.5 s, five ticks' worth at 10x. The recording
    # moves one interval per tick all the same, so every phase keeps all of its ticks.
    slow = gpu_check.Monitor.run_once
    calls = [0]

    async def late_run_once(self: Any) -> None:
        calls[0] += 1
        if calls[0] % 20 == 0:
            time.sleep(0.5)
        await slow(self)

    monkeypatch.setattr(gpu_check.Monitor, "run_once", late_run_once)
    assert gpu_check.main(["--replay", str(TRACE_FILE), "--speed", "10", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    ticks = [t["t"] for t in report["ticks"]]
    assert calls[0] >= 100 and len(ticks) == calls[0] - 1  # the first collection opens the replay
    # Records lie ~1.005 s apart: consecutive ticks read the same or the next one, never one after it.
    assert all(b - a < 1.5 for a, b in pairwise(ticks))
    idle2 = next(p for p in report["phases"] if p["name"] == "idle2")
    assert len([t for t in report["ticks"] if t["phase"] == "idle2" and t["steady"]]) >= 0.6 * (
        idle2["end"] - idle2["start"] - 3)


def test_a_gpu_whose_memory_never_fills_fails_the_check(tmp_path: Path) -> None:
    data = json.loads(TRACE_FILE.read_text())
    low = data["trace"][0]["mem_used"]
    data["trace"] = [{**r, "mem_used": min(r["mem_used"], low * 3)} for r in data["trace"]]
    trace = tmp_path / "unfilled.json"
    trace.write_text(json.dumps(data))

    # 10x, as the recipe: at 25x a busy machine read the export and NVML a tick apart.
    code, report = gpu_check.check(gpu_check.Options(out=tmp_path / "out", replay=trace, speed=10))

    assert code == 1
    assert failed(report) == ["memfill: memory used ratio > 0.9"]


def test_compare_holds_exported_values_to_the_reads_around_the_collection() -> None:
    before = {"util_gpu_pct": 99, "mem_used_bytes": 100, "mem_total_bytes": 1000, "mem_reserved_bytes": None,
              "temp_c": 54, "power_mw": 690_000, "power_limit_mw": 700_000, "clock_sm_mhz": 1425,
              "clock_event_mask": 4}
    after = {**before, "util_gpu_pct": 100, "power_mw": 694_000}
    values = {"utilization_ratio": 0.995, "kernel_active_ratio": 1.0, "memory_used_bytes": 100.0,
              "memory_total_bytes": 1000.0, "memory_used_ratio": 0.1, "temperature_celsius": 54.0,
              "power_watts": 692.0, "power_limit_watts": 700.0, "sm_clock_hertz": 1425e6}
    reasons = {reason: 1.0 if reason == "sw_power_cap" else 0.0 for reason in CLOCK_EVENT_REASONS}

    def exported(**changes: float) -> dict[str, Any]:
        return {"values": {**values, **changes}, "reasons": reasons}

    assert all(gpu_check.compare(exported(), before, after).values())
    assert "memory_reserved_bytes" not in gpu_check.compare(exported(), before, after)  # neither side has it
    assert gpu_check.compare(exported(power_watts=650.0), before, after)["power_watts"] is False
    assert gpu_check.compare(exported(utilization_ratio=0.9), before, after)["utilization_ratio"] is False
    assert gpu_check.compare(exported(memory_used_bytes=101.0), before, after)["memory_used_bytes"] is False
    missing = {"values": {k: v for k, v in values.items() if k != "temperature_celsius"}, "reasons": reasons}
    assert gpu_check.compare(missing, before, after)["temperature_celsius"] is False
    idle_reasons = {**exported(), "reasons": {**reasons, "sw_power_cap": 0.0, "gpu_idle": 1.0}}
    assert gpu_check.compare(idle_reasons, before, after)["clock_event_reasons"] is False


def test_device_mode_follows_the_phases_the_load_announces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The device path end to end, but NVML is the replay (stuck at its start: idle) and the
    # load subprocess only announces its phases: the plumbing works, and a GPU that does not
    # follow the load fails the phase rules while still matching NVML tick for tick.
    monkeypatch.setitem(sys.modules, "pynvml", ReplayNvml(h200_trace(), clock=lambda: 0.0))
    options = gpu_check.Options(out=tmp_path, phases="idle=0.6,burn=0.6,memfill=0.6,duty30=0.6,idle2=0.6",
                                interval=0.1, settle=0.2, dry_load=True)

    code, report = gpu_check.check(options)

    assert code == 1
    assert report["mode"] == "nvml"
    assert [p["name"] for p in report["phases"]] == PHASES
    assert report["load"]["returncode"] == 0
    assert [e["event"] for e in report["load"]["events"]][:2] == ["ready", "phase"]
    labels = [t["phase"] for t in report["ticks"]]
    assert set(PHASES) <= set(labels)
    assert labels.index("burn") < labels.index("memfill") < labels.index("duty30") < labels.index("idle2")
    assert set(failed(report)) == {"burn: utilization > 0.9", "burn: power / limit > 0.8",
                                   "memfill: memory used ratio > 0.9", "memfill: utilization > 0.9",
                                   "memfill: power / limit > 0.8", "duty30: utilization 0.2..0.4"}
    assert (tmp_path / "gpu_check.json").exists()
    assert "inference_gpu_utilization_ratio" in (tmp_path / "metrics_burn.prom").read_text()
