"""Does /metrics track the GPU? The monitor against NVML itself, side by side, under a real load.

One run, on a machine with an NVIDIA GPU (about 2 minutes on the H200):

    python -m bench.gpu_check --out DIR [--phases idle=10,burn=30,memfill=15,duty30=20,idle2=10]
                                        [--scale 1.0] [--settle 3] [--no-load]

A torch subprocess loads GPU 0 in the phases of the H200 recording (tests/fixtures/
nvml_h200_trace.json): idle, a bf16 matmul burn, memory filled to > 90 % while burning, a
30 % duty cycle, idle again. Meanwhile a `Monitor` (infra.nvml.enabled: true, interval 1s, no
service targets, storage sqlite://) collects once a second, and each second records side by
side what pynvml says directly (read just before and just after the collection) and what the
monitor's /metrics page says for GPU 0 (parsed with prometheus_client's text parser).

It asserts that the exported values track NVML: utilization > 0.9 under burn, memory ratio
> 0.9 when filled, power / limit > 0.8 under burn, utilization 0.2..0.4 in the duty phase,
idle at idle; and that each exported value equals NVML's at the same tick (converted to base
units; it must lie between the reads before and after the collection, within a small
tolerance) on >= 95 % of ticks. Ticks in the first `--settle` seconds of a phase are not
held to the phase's rule (NVML averages utilization and power over a past window).

Writes to DIR: gpu_check.json (the per-second side-by-side trace, the phases as the load
reported them, the assertion results, the collector's timings), metrics_burn.prom (a whole
/metrics page from the burn phase); prints a summary; exits 1 when an assertion fails.

Without a GPU, the same logic runs against the recording through the monitor's replay source
(infra.replay.file), sped up `--speed` times, the recording moving one interval per tick
(never skipping records when a collection runs late); "NVML directly" is then the replayed
pynvml module at the same instant, and the phases are the recording's (its `load_log`):

    python -m bench.gpu_check --replay tests/fixtures/nvml_h200_trace.json --speed 10 --out /tmp/gc

On the device machine (nvidia-h200: Python 3.12 with torch and nvidia-ml-py, but no
fastapi/pydantic/SQLAlchemy/...): first, here, in the repo root, `bash scripts/device_wheels.sh`
(fills the git-ignored .whl/, ~10 MiB), then one call of the device tool's `run` with
carry [".whl"], timeout_s 300 and this command:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; set -o pipefail; PYTHONUNBUFFERED=1 python3 -m bench.gpu_check --out $OUT 2>&1 | tee $OUT/gpu_check.log
"""  # noqa: E501

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from monitor.config import Settings, load_settings
from monitor.infra.reading import CLOCK_EVENT_REASONS
from monitor.runtime import Monitor

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PHASES = "idle=10,burn=30,memfill=15,duty30=20,idle2=10"
GPU = "0"
MATRIX = 8192  # bf16 8192^3: ~1.4 ms a product on an H200, so the load checks the clock often
FILL_TARGET = 0.94  # of the GPU's memory, while `memfill` runs
FILL_MARGIN = 4 << 30  # bytes left free whatever the target
DUTY_PERIOD_S = 0.1
MATCH_REQUIRED = 0.95  # share of ticks on which an exported value must equal NVML's
PHASE_REQUIRED = 0.9  # share of a phase's steady ticks that must meet the phase's rule

# Exported field -> (NVML field in base units, absolute tolerance on top of the before/after range)
COMPARED: dict[str, tuple[str, float]] = {
    "utilization_ratio": ("utilization_ratio", 1e-9),
    "kernel_active_ratio": ("utilization_ratio", 1e-9),
    "memory_used_bytes": ("memory_used_bytes", 0.0),
    "memory_total_bytes": ("memory_total_bytes", 0.0),
    "memory_reserved_bytes": ("memory_reserved_bytes", 0.0),
    "memory_used_ratio": ("memory_used_ratio", 1e-9),
    "temperature_celsius": ("temperature_celsius", 1.0),
    "power_watts": ("power_watts", 10.0),  # the sensor moves by a few W between reads
    "power_limit_watts": ("power_limit_watts", 1e-6),
    "sm_clock_hertz": ("sm_clock_hertz", 30e6),
}


# -- phases -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    name: str
    start: float  # scenario seconds
    end: float

    @property
    def kind(self) -> str:
        return phase_kind(self.name)


def phase_kind(name: str) -> str:
    for kind in ("idle", "burn", "memfill", "duty"):
        if name.startswith(kind):
            return kind
    raise ValueError(f"unknown phase {name!r} (names start with idle, burn, memfill or duty<percent>)")


def duty_fraction(name: str) -> float:
    digits = name.removeprefix("duty")
    return int(digits) / 100.0 if digits.isdigit() else 0.3


def parse_phases(spec: str, scale: float = 1.0) -> list[tuple[str, float]]:
    """`idle=10,burn=30` -> [("idle", 10.0), ("burn", 30.0)], durations times `scale`."""
    phases = []
    for part in spec.split(","):
        name, _, seconds = part.strip().partition("=")
        phase_kind(name)
        phases.append((name, float(seconds) * scale))
    return phases


def phase_at(phases: list[Phase], t: float) -> tuple[str, float]:
    """The phase a scenario time falls in and how long it had been running ("pre"/"post" outside)."""
    if not phases or t < phases[0].start:
        return "pre", 0.0
    for phase in phases:
        if phase.start <= t < phase.end:
            return phase.name, t - phase.start
    return "post", t - phases[-1].end


# -- the load (a subprocess: the GIL stays with the monitor) -------------------------------------


def emit(event: str, **data: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **data}), flush=True)


def load_worker(spec: str, dry: bool = False) -> int:
    """Run the phases on GPU 0 with torch, announcing each as a JSON line on stdout.

    `dry`: no torch, no GPU: only the announcements, at the same times (tests the plumbing).
    """
    if dry:
        emit("ready", device="dry run")
        for name, seconds in parse_phases(spec):
            emit("phase", name=name)
            time.sleep(seconds)
            emit("phase_end", name=name, products=0, tflops=0.0)
        emit("done")
        return 0
    import torch

    try:
        device = torch.device("cuda", 0)
        a = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.bfloat16)
        b = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.bfloat16)
        c = torch.empty_like(a)
        for _ in range(3):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        emit("ready", device=torch.cuda.get_device_name(device), torch=torch.__version__)
        held: list[Any] = []
        for name, seconds in parse_phases(spec):
            started = time.monotonic()
            end = started + seconds
            emit("phase", name=name)
            kind = phase_kind(name)
            if kind != "memfill" and held:
                held.clear()
                torch.cuda.empty_cache()
            products = 0
            if kind == "memfill":
                held = fill_memory(torch, device)
                free, total = torch.cuda.mem_get_info(device)
                emit("filled", used_ratio=(total - free) / total, bytes=sum(t.numel() for t in held))
            if kind in ("burn", "memfill"):
                while time.monotonic() < end:
                    for _ in range(8):
                        torch.matmul(a, b, out=c)
                    torch.cuda.synchronize()
                    products += 8
            elif kind == "duty":
                busy = duty_fraction(name) * DUTY_PERIOD_S
                while (cycle := time.monotonic()) < end:
                    while time.monotonic() - cycle < busy:
                        torch.matmul(a, b, out=c)
                        torch.cuda.synchronize()
                        products += 1
                    time.sleep(max(0.0, cycle + DUTY_PERIOD_S - time.monotonic()))
            else:
                time.sleep(max(0.0, end - time.monotonic()))
            elapsed = time.monotonic() - started
            emit("phase_end", name=name, products=products,
                 tflops=round(2 * MATRIX**3 * products / elapsed / 1e12, 1))
        held.clear()
        torch.cuda.empty_cache()
        emit("done")
        return 0
    except Exception as exc:
        emit("error", error=f"{type(exc).__name__}: {exc}")
        return 1


def fill_memory(torch: Any, device: Any) -> list[Any]:
    """Plain allocations (the caching allocator's cudaMalloc) up to FILL_TARGET of the GPU."""
    held: list[Any] = []
    chunk = 2 << 30
    while True:
        free, total = torch.cuda.mem_get_info(device)
        want = int(FILL_TARGET * total) - (total - free)
        size = min(chunk, want, free - FILL_MARGIN)
        if size < 64 << 20:
            return held
        block = torch.empty(size, dtype=torch.uint8, device=device)
        block.fill_(1)  # touch it
        held.append(block)


class LoadProcess:
    """The load worker, its announcements collected by a reader thread."""

    def __init__(self, spec: str, dry: bool = False) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.spec = spec
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.gpu_check", "--load-worker", spec, *(["--dry-load"] if dry else [])],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._read, name="gpu-check-load", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if isinstance(event, dict) and "event" in event:
                self.events.append(event)
            else:
                self.log.append(line.rstrip())
                del self.log[:-200]

    def seen(self, name: str) -> bool:
        return any(e["event"] == name for e in self.events)

    @property
    def finished(self) -> bool:
        return self.proc.poll() is not None or self.seen("done") or self.seen("error")

    def phases(self, origin: float) -> list[Phase]:
        """The phases as the load ran them, in seconds since `origin` (a time.monotonic())."""
        starts = [(e["name"], e["t"] - origin) for e in list(self.events) if e["event"] == "phase"]
        if not starts:
            return []
        ends = [e["t"] - origin for e in list(self.events) if e["event"] in ("done", "error")]
        bounds = [t for _, t in starts[1:]] + [ends[0] if ends else math.inf]
        return [Phase(name, start, end) for (name, start), end in zip(starts, bounds, strict=True)]

    def stop(self) -> int | None:
        if self.seen("done") or self.seen("error"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)  # it announced its end: let it exit by itself
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


# -- NVML directly --------------------------------------------------------------------------------


class DirectNvml:
    """GPU 0 through the pynvml API itself (the real module, or the replay standing in for it)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handle = nvml.nvmlDeviceGetHandleByIndex(0)
        self.memory_v2 = hasattr(nvml, "nvmlMemory_v2")

    def identity(self) -> dict[str, str]:
        return {"uuid": _text(self.nvml.nvmlDeviceGetUUID(self.handle)),
                "model": _text(self.nvml.nvmlDeviceGetName(self.handle)),
                "driver": _text(self.nvml.nvmlSystemGetDriverVersion())}

    def _get(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(self.handle, *args)
        except self.nvml.NVMLError as exc:
            return f"error: {type(exc).__name__}"

    def read(self) -> dict[str, Any]:
        """NVML's own units: %, bytes, °C, mW, MHz, the clock-event bitmask."""
        nvml = self.nvml
        raw: dict[str, Any] = {}
        util = self._get(nvml.nvmlDeviceGetUtilizationRates)
        raw["util_gpu_pct"] = util if isinstance(util, str) else util.gpu
        memory: Any = "error"
        if self.memory_v2:
            memory = self._get(nvml.nvmlDeviceGetMemoryInfo, nvml.nvmlMemory_v2)
            if isinstance(memory, str):
                self.memory_v2 = False  # old drivers (and the replay) only answer v1
        if not self.memory_v2:
            memory = self._get(nvml.nvmlDeviceGetMemoryInfo)
        raw["memory_version"] = 2 if self.memory_v2 else 1
        for name in ("used", "total", "reserved"):
            raw[f"mem_{name}_bytes"] = memory if isinstance(memory, str) else getattr(memory, name, None)
        raw["temp_c"] = self._get(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)
        raw["power_mw"] = self._get(nvml.nvmlDeviceGetPowerUsage)
        raw["power_limit_mw"] = self._get(nvml.nvmlDeviceGetEnforcedPowerLimit)
        raw["clock_sm_mhz"] = self._get(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)
        events = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        raw["clock_event_mask"] = self._get(events)
        return raw


def base_units(raw: dict[str, Any]) -> dict[str, float | None]:
    """NVML's numbers converted to what /metrics exports (ratios, bytes, W, Hz)."""

    def num(key: str, factor: float = 1.0) -> float | None:
        value = raw.get(key)
        return float(value) * factor if isinstance(value, int | float) and not isinstance(value, bool) else None

    used, total = num("mem_used_bytes"), num("mem_total_bytes")
    return {
        "utilization_ratio": num("util_gpu_pct", 0.01),
        "memory_used_bytes": used,
        "memory_total_bytes": total,
        "memory_reserved_bytes": num("mem_reserved_bytes"),
        "memory_used_ratio": used / total if used is not None and total else None,
        "temperature_celsius": num("temp_c"),
        "power_watts": num("power_mw", 1e-3),
        "power_limit_watts": num("power_limit_mw", 1e-3),
        "sm_clock_hertz": num("clock_sm_mhz", 1e6),
    }


# -- what /metrics says -------------------------------------------------------------------------


def exported_gpu(text: str, gpu: str = GPU) -> dict[str, Any]:
    """GPU `gpu`'s series on a /metrics page: {field: value}, reasons, info, up, collector time."""
    values: dict[str, float] = {}
    reasons: dict[str, float] = {}
    out: dict[str, Any] = {"values": values, "reasons": reasons, "info": None, "up": None,
                           "collector_duration_s": None}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "inference_monitor_collector_duration_seconds" and \
                    labels.get("collector") == "infra" and labels.get("target") == gpu:
                out["collector_duration_s"] = sample.value
            if labels.get("gpu") != gpu:
                continue
            if sample.name == "inference_gpu_up":
                out["up"] = sample.value
            elif sample.name == "inference_gpu_info":
                out["info"] = {key: labels[key] for key in ("uuid", "model", "driver") if key in labels}
            elif sample.name == "inference_gpu_clock_event_active":
                reasons[labels["reason"]] = sample.value
            elif sample.name.startswith("inference_gpu_") and set(labels) == {"node", "gpu"}:
                values[sample.name.removeprefix("inference_gpu_")] = sample.value
    return out


def compare(exported: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, bool]:
    """Per field: does the exported value lie within NVML's reads around the collection?"""
    result: dict[str, bool] = {}
    low_high = (base_units(before), base_units(after))
    values = exported["values"]
    for name, (nvml_name, tolerance) in COMPARED.items():
        reads = [read for u in low_high if (read := u[nvml_name]) is not None]
        if not reads and name not in values:
            continue  # neither side has it (the GPU does not support it)
        value = values.get(name)
        result[name] = value is not None and bool(reads) and \
            min(reads) - tolerance - 1e-9 * abs(value) <= value <= max(reads) + tolerance + 1e-9 * abs(value)
    masks = [r["clock_event_mask"] for r in (before, after) if isinstance(r["clock_event_mask"], int)]
    if masks or exported["reasons"]:
        result["clock_event_reasons"] = bool(masks) and any(
            all(exported["reasons"].get(reason) == (1.0 if mask & bit else 0.0)
                for reason, bit in CLOCK_EVENT_REASONS.items())
            for mask in masks)
    return result


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Options:
    out: Path
    phases: str = DEFAULT_PHASES
    scale: float = 1.0
    settle: float = 3.0
    interval: float = 1.0
    no_load: bool = False
    idle_seconds: float = 10.0  # --no-load: how long to watch the idle GPU
    ready_timeout: float = 90.0  # torch import + CUDA start + first products
    replay: Path | None = None
    speed: float = 1.0
    dry_load: bool = False  # the load subprocess only announces its phases (no torch)


@dataclass
class Run:
    mode: str
    settings: Settings
    ticks: list[dict[str, Any]] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    identity: dict[str, str] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    burn_page: str | None = None


def monitor_settings(options: Options, replay_file: Path | None) -> Settings:
    infra: dict[str, Any] = {"nvml": {"enabled": "true"}, "interval": f"{options.interval * 1000:g}ms",
                             "timeout": "2s"}
    if replay_file is not None:
        infra["replay"] = {"file": str(replay_file)}
    return load_settings(None, {"infra": infra, "service": {"targets": []}, "storage": {"url": "sqlite://"}})


async def observe(run: Run, monitor: Monitor, direct: DirectNvml, scenario: Callable[[], float],
                  phases: Callable[[], list[Phase]], done: Callable[[], bool], interval: float,
                  deadline: float, settle: float, advance: Callable[[], None] = lambda: None) -> None:
    """Tick every `interval` s until `done()`: NVML, collect, NVML, /metrics, side by side;
    `advance()` after each tick (a replay's recording moves one interval per tick)."""
    next_tick = time.monotonic()
    while not done() and time.monotonic() < deadline:
        t = scenario()
        started = time.perf_counter()
        before = direct.read()
        direct_s = time.perf_counter() - started
        started = time.perf_counter()
        await monitor.run_once()
        collect_s = time.perf_counter() - started
        after = direct.read()
        started = time.perf_counter()
        text = monitor.metrics_text().decode()
        render_s = time.perf_counter() - started
        started = time.perf_counter()
        exported = exported_gpu(text)
        parse_s = time.perf_counter() - started
        phase, in_phase = phase_at(phases(), t)
        steady = phase not in ("pre", "post") and in_phase >= settle
        if run.burn_page is None and steady and phase_kind_or_none(phase) == "burn":
            run.burn_page = text
        run.ticks.append({
            "t": round(t, 3), "phase": phase, "in_phase_s": round(in_phase, 3), "steady": steady,
            "nvml_before": before, "nvml_after": after, "nvml": base_units(after),
            "exported": exported, "match": compare(exported, before, after),
            "timings_s": {"collect": collect_s, "nvml_read": exported["collector_duration_s"],
                          "render": render_s, "parse": parse_s, "direct_read": direct_s},
        })
        advance()
        next_tick += interval
        now = time.monotonic()
        if next_tick < now:  # overran: skip the missed slots, keep the grid
            next_tick += math.ceil((now - next_tick) / interval) * interval
        await asyncio.sleep(next_tick - now)


def phase_kind_or_none(name: str) -> str | None:
    try:
        return phase_kind(name)
    except ValueError:
        return None


class NoNvml(Exception):
    """NVML cannot be loaded or initialised here: the check has no GPU to read."""


async def run_device(options: Options) -> Run:
    import pynvml

    settings = monitor_settings(options, None)
    run = Run("nvml", settings)
    try:
        pynvml.nvmlInit()  # our own reference; the monitor takes its own (NVML counts them)
    except pynvml.NVMLError as exc:
        raise NoNvml(f"NVML cannot start here ({type(exc).__name__}): run this on a machine with an NVIDIA GPU, "
                     "or use --replay tests/fixtures/nvml_h200_trace.json --speed 10") from None
    monitor = Monitor(settings)
    load: LoadProcess | None = None
    try:
        direct = DirectNvml(pynvml)
        run.identity = direct.identity()
        await monitor.run_once()  # opens NVML: the first tick is not an open's cost
        origin = time.monotonic()
        if options.no_load:
            run.phases = [Phase("idle", 0.0, options.idle_seconds)]
            await observe(run, monitor, direct, lambda: time.monotonic() - origin, lambda: run.phases,
                          lambda: time.monotonic() - origin >= options.idle_seconds, options.interval,
                          origin + options.idle_seconds + 30, options.settle)
        else:
            spec = ",".join(f"{name}={seconds:g}" for name, seconds in parse_phases(options.phases, options.scale))
            total = sum(seconds for _, seconds in parse_phases(spec))
            load = LoadProcess(spec, options.dry_load)
            current = load

            def finished() -> bool:  # the load ended (or never got ready)
                if not current.seen("ready") and time.monotonic() - origin > options.ready_timeout:
                    return True
                return current.finished

            await observe(run, monitor, direct, lambda: time.monotonic() - origin,
                          lambda: current.phases(origin), finished, options.interval,
                          origin + options.ready_timeout + total + 30, options.settle)
            run.phases = load.phases(origin)
    finally:
        if load is not None:
            returncode = load.stop()
            run.load = {"spec": load.spec, "returncode": returncode, "events": load.events, "log_tail": load.log[-50:]}
        await monitor.aclose()
        pynvml.nvmlShutdown()
    return run


def recording_phases(data: dict[str, Any]) -> list[Phase]:
    """The recording's phases (its load_log) in trace seconds; the load started at the first process."""
    records = data["trace"]
    offset = next((r["t"] for r in records if r.get("nproc", 0) > 0), records[0]["t"])
    starts: list[tuple[str, float]] = []
    end = math.inf
    for line in str(data.get("load_log", "")).splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "phase":
            starts.append((words[1], offset + float(words[2])))
        elif len(words) == 2 and words[0] == "done":
            end = offset + float(words[1])
    if not starts:
        return []
    bounds = [t for _, t in starts[1:]] + [end]
    return [Phase(name, start, stop) for (name, start), stop in zip(starts, bounds, strict=True)]


async def run_replay(options: Options) -> Run:
    assert options.replay is not None
    data = json.loads(options.replay.read_text())
    speed = options.speed
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as folder:
        scaled = Path(folder) / "trace.json"
        # The same readings, `speed` times faster: only the timestamps change.
        scaled.write_text(json.dumps({**data, "trace": [{**r, "t": r["t"] / speed} for r in data["trace"]]}))
        settings = monitor_settings(Options(out=options.out, interval=options.interval / speed), scaled)
        run = Run("replay", settings)
        run.phases = recording_phases(data)
        monitor = Monitor(settings)
        try:
            await monitor.run_once()  # opens the replay: playback starts here
            assert monitor.infra.local is not None
            replay: Any = getattr(monitor.infra.local.backend, "nvml")  # noqa: B009  (NvmlBackend's module)
            direct = DirectNvml(replay)
            run.identity = direct.identity()
            period = replay.trace.period
            # The recording moves one tick's interval per tick, not with the wall clock: on a
            # starved machine a slow collection (1 s beside two CPU hogs) skipped records, and the
            # last phase was seen for less than its length. Playback restarts on this clock.
            step, ticks = options.interval / speed, [0]
            replay.clock = lambda: ticks[0] * step
            replay.restart()

            def scenario() -> float:
                record, loops = replay.record()
                return float(record["t"] + loops * period) * speed

            def advance() -> None:
                ticks[0] += 1

            await observe(run, monitor, direct, scenario, lambda: run.phases,
                          lambda: replay.record()[1] >= 1, step,
                          time.monotonic() + period + 30, options.settle, advance)
        finally:
            await monitor.aclose()
    return run


# -- the verdict ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    kind: str  # the phase kind it holds for
    name: str
    value: Callable[[dict[str, float]], float | None]
    test: Callable[[float], bool]


def _ratio(values: dict[str, float], top: str, bottom: str) -> float | None:
    if top not in values or not values.get(bottom):
        return None
    return values[top] / values[bottom]


RULES = (
    Rule("burn", "utilization > 0.9", lambda v: v.get("utilization_ratio"), lambda x: x > 0.9),
    Rule("burn", "power / limit > 0.8", lambda v: _ratio(v, "power_watts", "power_limit_watts"), lambda x: x > 0.8),
    Rule("memfill", "memory used ratio > 0.9", lambda v: v.get("memory_used_ratio"), lambda x: x > 0.9),
    Rule("memfill", "utilization > 0.9", lambda v: v.get("utilization_ratio"), lambda x: x > 0.9),
    Rule("memfill", "power / limit > 0.8", lambda v: _ratio(v, "power_watts", "power_limit_watts"), lambda x: x > 0.8),
    Rule("duty", "utilization 0.2..0.4", lambda v: v.get("utilization_ratio"), lambda x: 0.2 <= x <= 0.4),
    Rule("idle", "utilization < 0.05", lambda v: v.get("utilization_ratio"), lambda x: x < 0.05),
    Rule("idle", "memory used ratio < 0.5", lambda v: v.get("memory_used_ratio"), lambda x: x < 0.5),
)


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def verdict(run: Run) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    def check(name: str, ok: bool, **detail: Any) -> None:
        results.append({"name": name, "ok": ok, **detail})

    ticks = run.ticks
    check("ticks recorded", len(ticks) >= 3, ticks=len(ticks))
    up = [t["exported"]["up"] for t in ticks]
    check("inference_gpu_up is 1 on every tick", bool(up) and all(u == 1.0 for u in up),
          down_ticks=sum(1 for u in up if u != 1.0))
    infos = [t["exported"]["info"] for t in ticks if t["exported"]["info"]]
    check("inference_gpu_info matches NVML's uuid, name and driver",
          bool(infos) and all(i == run.identity for i in infos), nvml=run.identity,
          exported=infos[-1] if infos else None)
    if run.mode == "nvml" and run.load:
        check("the load ran every phase", any(e["event"] == "done" for e in run.load.get("events", [])),
              returncode=run.load.get("returncode"),
              errors=[e["error"] for e in run.load.get("events", []) if e["event"] == "error"])
    # Exported == NVML at the same tick.
    fields = sorted({name for t in ticks for name in t["match"]})
    for name in fields:
        outcomes = [t["match"][name] for t in ticks if name in t["match"]]
        bad = [t["t"] for t in ticks if t["match"].get(name) is False]
        share = sum(outcomes) / len(outcomes)
        check(f"exported {name} equals NVML's", share >= MATCH_REQUIRED, ticks=len(outcomes),
              matching=round(share, 4), required=MATCH_REQUIRED, mismatch_at=bad[:20])
    # The phase rules, on the exported values of each phase's steady ticks.
    for phase in run.phases:
        steady = [t for t in ticks if t["phase"] == phase.name and t["steady"]]
        for rule in RULES:
            if rule.kind != phase.kind:
                continue
            values = [v for t in steady if (v := rule.value(t["exported"]["values"])) is not None]
            nvml = [v for t in steady if (v := rule.value({k: x for k, x in t["nvml"].items() if x is not None}))
                    is not None]
            passing = sum(1 for v in values if rule.test(v))
            share = passing / len(values) if values else 0.0
            check(f"{phase.name}: {rule.name}", bool(values) and share >= PHASE_REQUIRED, steady_ticks=len(steady),
                  passing=passing, required=PHASE_REQUIRED, exported=_spread(values), nvml=_spread(nvml))
    return results


def timings(ticks: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    out: dict[str, dict[str, float] | None] = {}
    for name in ("collect", "nvml_read", "render", "parse", "direct_read"):
        values = sorted(v * 1000 for t in ticks if (v := t["timings_s"][name]) is not None)
        out[f"{name}_ms"] = None if not values else {
            "p50": round(statistics.median(values), 4), "p99": round(values[min(len(values) - 1,
                                                                                  int(0.99 * len(values)))], 4),
            "max": round(values[-1], 4), "n": len(values)}
    return out


def phase_table(run: Run) -> Iterator[str]:
    yield f"{'phase':<9} {'ticks':>5} {'util nvml/exp':>14} {'mem ratio':>10} {'power/limit':>12} {'sm MHz':>7}"
    names = ["pre", *[p.name for p in run.phases], "post"]
    for name in names:
        steady = [t for t in run.ticks if t["phase"] == name and (t["steady"] or name in ("pre", "post"))]
        if not steady:
            continue

        def median(key: str, source: str = "exported", steady: list[dict[str, Any]] = steady) -> float:
            if source == "nvml":
                values = [v for t in steady if (v := t["nvml"].get(key)) is not None]
            else:
                values = [v for t in steady if (v := t["exported"]["values"].get(key)) is not None]
            return statistics.median(values) if values else math.nan

        power = median("power_watts") / median("power_limit_watts")
        yield (f"{name:<9} {len(steady):>5} {median('utilization_ratio', 'nvml'):>6.2f}/"
               f"{median('utilization_ratio'):<7.2f} {median('memory_used_ratio'):>10.3f} {power:>12.2f} "
               f"{median('sm_clock_hertz') / 1e6:>7.0f}")


def check(options: Options) -> tuple[int, dict[str, Any]]:
    """Run the whole check; write gpu_check.json and metrics_burn.prom; (exit code, report)."""
    started = time.perf_counter()
    run = asyncio.run(run_replay(options) if options.replay is not None else run_device(options))
    results = verdict(run)
    ok = all(r["ok"] for r in results)
    report = {
        "ok": ok,
        "mode": run.mode,
        "gpu": run.identity,
        "options": {"phases": options.phases, "scale": options.scale, "settle_s": options.settle,
                    "interval_s": options.interval, "no_load": options.no_load,
                    "replay": str(options.replay) if options.replay else None, "speed": options.speed},
        "settings": run.settings.model_dump(mode="json", include={"infra", "storage"}),
        "phases": [{"name": p.name, "start": round(p.start, 3), "end": round(p.end, 3)} for p in run.phases],
        "assertions": results,
        "timings": timings(run.ticks),
        "load": run.load,
        "wall_s": round(time.perf_counter() - started, 2),
        "ticks": run.ticks,
    }
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    if run.burn_page is not None:
        (options.out / "metrics_burn.prom").write_text(run.burn_page)
    for line in summary(report, run):
        print(line)
    return (0 if ok else 1), report


def summary(report: dict[str, Any], run: Run) -> Iterator[str]:
    gpu = report["gpu"]
    yield f"gpu_check ({report['mode']}): {gpu.get('model')} {gpu.get('uuid')} driver {gpu.get('driver')}, " \
          f"{len(run.ticks)} ticks in {report['wall_s']} s"
    for event in run.load.get("events", []):
        if event["event"] in ("ready", "filled", "phase_end", "error"):
            yield "  load: " + ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("t",))
    if run.load and run.load.get("returncode") not in (0, None):
        yield f"  load exited {run.load['returncode']}; its last output:"
        yield from (f"    {line}" for line in run.load.get("log_tail", [])[-20:])
    yield from phase_table(run)
    for result in report["assertions"]:
        yield f"{'PASS' if result['ok'] else 'FAIL'}  {result['name']}"
    for name, spread in report["timings"].items():
        if spread:
            yield f"  {name}: p50 {spread['p50']:.3f}  p99 {spread['p99']:.3f}  max {spread['max']:.3f}"
    yield f"{'OK' if report['ok'] else 'FAILED'}: {sum(r['ok'] for r in report['assertions'])}/" \
          f"{len(report['assertions'])} assertions pass"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "gpu_check")
    parser.add_argument("--phases", default=DEFAULT_PHASES, help="name=seconds,... (idle*, burn*, memfill*, duty<N>*)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every phase's duration (short runs)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds at a phase's start not held to its rule")
    parser.add_argument("--no-load", action="store_true", help="no torch load: watch the idle GPU --idle-seconds")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--replay", type=Path, help="no GPU: play this NVML recording through infra.replay.file")
    parser.add_argument("--speed", type=float, default=1.0, help="--replay: play the recording this many times faster")
    parser.add_argument("--load-worker", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--dry-load", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load_worker:
        return load_worker(args.load_worker, args.dry_load)
    parse_phases(args.phases)  # a bad spec fails here, not in the subprocess
    options = Options(out=args.out, phases=args.phases, scale=args.scale, settle=args.settle, no_load=args.no_load,
                      idle_seconds=args.idle_seconds, replay=args.replay, speed=args.speed,
                      dry_load=args.dry_load)
    try:
        code, _ = check(options)
    except NoNvml as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    return code


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
