"""The GPUs' error history across reads: XIDs counted as events, error counters as increases.

A read shows a GPU at one moment; what an operator acts on is what *changed*: a new XID, ECC
errors or PCIe replays that keep coming. The alert rules compare a number with a threshold (the
subset both evaluators understand has no `increase()`), so the ledger turns the readings into
numbers a rule can compare:

    xid_total{xid}    every XID counted since the monitor started (a counter: Prometheus' increase())
    xid_recent{xid}   the XIDs counted over the last XID_WINDOW (a gauge: goes back to 0, never sticks)
    increase{kind}    an error counter's increase over the last ERROR_WINDOW, resets counted as
                      Prometheus' increase() counts them (no extrapolation)

XIDs come three ways. NVML delivers each one as an event (`GpuReading.xid_events`). Newer
dcgm-exporters count them by XID where their CSV enables it (`xid_totals`, `xid_window_counts`):
their increases are the new XIDs. Otherwise dcgm-exporter shows only the last XID as a gauge that
keeps its value until the host engine restarts (`GpuReading.xid_last`): each change to a non-zero
value is one event, and so is the first non-zero value seen (the monitor cannot tell an XID logged
before it started from one logged just now; it counts it once, so a page showing XID 48 alerts at
once). The same XID twice in a row between two scrapes is one event: the gauge does not show the
second.

A GPU reset is the action most XIDs ask for, and it ends them: once the GPU shows one (its volatile
uncorrectable ECC count drops, or a pending row remap or page retirement is no longer pending), its
XIDs leave the window at once, so their alerts resolve when the operator has acted, not an hour later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from monitor.infra.reading import GpuErrors, GpuReading, GpuState

XID_WINDOW = ("1h", 3600.0)  # (label, seconds): long enough to page, short enough not to stick
ERROR_WINDOW = ("10m", 600.0)
# Error kind -> the GpuReading counter whose increase is kept.
COUNTERS: dict[str, str] = {
    "ecc_uncorrected": "ecc_uncorrected_errors",
    "ecc_corrected": "ecc_corrected_errors",
    "pcie_replay": "pcie_replay_errors",
    "nvlink_crc_flit": "nvlink_crc_flit_errors",
    "nvlink_crc_data": "nvlink_crc_data_errors",
    "nvlink_replay": "nvlink_replay_errors",
    "nvlink_recovery": "nvlink_recovery_errors",
}

Key = tuple[str, str, str]  # node, gpu, source


@dataclass
class _Gpu:
    xid_last: float | None = None
    reset_marks: tuple[float | None, float | None, float | None] = (None, None, None)
    xid_total: dict[str, float] = field(default_factory=dict)
    xid_times: deque[tuple[float, str, float]] = field(default_factory=deque)  # (when, XID, how many)
    xid_counts: dict[str, float] = field(default_factory=dict)  # dcgm-exporter's counts last seen
    counters: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)


class ErrorLedger:
    """One per collector; `update` runs once per tick with the tick's states, in tick order."""

    def __init__(self) -> None:
        self._gpus: dict[Key, _Gpu] = {}

    def update(self, states: list[GpuState], now: float) -> list[GpuState]:
        """The states with their `errors`; a GPU that is down keeps its XIDs (XID 79 is one)."""
        out = []
        for state in states:
            gpu = self._gpus.setdefault((state.node, state.gpu, state.source), _Gpu())
            if state.reading is not None:
                if _was_reset(gpu, state.reading):
                    gpu.xid_times.clear()
                _count_xids(gpu, state.reading, now)
                _sample_counters(gpu, state.reading, now)
            errors = _errors(gpu, now)
            out.append(replace(state, errors=errors) if errors is not None else state)
        return out


def _was_reset(gpu: _Gpu, reading: GpuReading) -> bool:
    """Whether the reading shows a GPU reset since the last one (see the module's docstring)."""
    marks = (reading.ecc_uncorrected_errors, reading.row_remap_pending, reading.retired_pages_pending)
    before, gpu.reset_marks = gpu.reset_marks, marks
    return any(old is not None and new is not None and new < old for old, new in zip(before, marks, strict=True))


def _count_xids(gpu: _Gpu, reading: GpuReading, now: float) -> None:
    new: dict[str, float] = {}
    for event in reading.xid_events or ():
        new[str(event)] = new.get(str(event), 0.0) + 1.0
    counts = reading.xid_totals if reading.xid_totals is not None else reading.xid_window_counts
    if counts is not None:
        # dcgm-exporter's own counts: their increases are new XIDs (first sight: all of them). A total
        # that drops restarted with the exporter (all new); a window's count that drops lost old ones.
        restarted = reading.xid_totals is not None
        for xid, count in counts.items():
            before = gpu.xid_counts.get(xid)
            added = count if before is None or (count < before and restarted) else max(0.0, count - before)
            gpu.xid_counts[xid] = count
            if added > 0:
                new[xid] = new.get(xid, 0.0) + added
    elif reading.xid_last is not None:
        last = reading.xid_last
        if last != gpu.xid_last and last > 0:
            new[f"{last:g}"] = new.get(f"{last:g}", 0.0) + 1.0
        gpu.xid_last = last
    for xid, count in new.items():
        gpu.xid_total[xid] = gpu.xid_total.get(xid, 0.0) + count
        gpu.xid_times.append((now, xid, count))


def _sample_counters(gpu: _Gpu, reading: GpuReading, now: float) -> None:
    for kind, attribute in COUNTERS.items():
        value = getattr(reading, attribute)
        if value is not None:
            samples = gpu.counters.setdefault(kind, deque())
            samples.append((now, value))
            # Keep one sample at or before the window's start: the increase is measured from it.
            while len(samples) > 1 and samples[1][0] <= now - ERROR_WINDOW[1]:
                samples.popleft()


def _errors(gpu: _Gpu, now: float) -> GpuErrors | None:
    while gpu.xid_times and gpu.xid_times[0][0] <= now - XID_WINDOW[1]:
        gpu.xid_times.popleft()
    if not gpu.xid_total and not gpu.counters:
        return None
    recent = dict.fromkeys(gpu.xid_total, 0.0)
    for _, xid, count in gpu.xid_times:
        recent[xid] += count
    increase = {kind: increase_of(samples) for kind, samples in gpu.counters.items()}
    return GpuErrors(dict(gpu.xid_total), recent, increase)


def increase_of(samples: deque[tuple[float, float]] | list[tuple[float, float]]) -> float:
    """Prometheus' increase over the samples without its extrapolation: a drop is a counter
    reset (driver reload, GPU reset), after which the new value counts whole."""
    total, previous = 0.0, None
    for _, value in samples:
        if previous is not None:
            total += value - previous if value >= previous else value
        previous = value
    return total


# XIDs whose action is a drain (alerts/infra.yml: the critical ones) and those acted on when convenient.
DRAIN_XIDS = frozenset({"48", "64", "74", "79", "95"})
CONVENIENT_XIDS = frozenset({"63", "94"})


def gpu_health(state: GpuState) -> tuple[str, tuple[str, ...]] | None:
    """The GPU's health in a word and its reasons, as the overview and `infermon status` show it:
    ("critical", ...) = drain it, ("warning", ...) = reset when convenient, ("ok", ()) = nothing
    found; None when the source reports no health field at all (not known, rather than ok)."""
    reading, errors = state.reading, state.errors
    critical: list[str] = []
    warning: list[str] = []
    recent = {xid for xid, count in (errors.xid_recent if errors else {}).items() if count > 0}
    critical += [f"XID {xid}" for xid in sorted(recent & DRAIN_XIDS, key=int)]
    warning += [f"XID {xid}" for xid in sorted(recent & CONVENIENT_XIDS, key=int)]
    known = errors is not None
    if reading is not None:
        flags = ((reading.row_remap_failed, critical, "row remap failed"),
                 (reading.ecc_uncorrected_errors, critical, "uncorrectable ECC errors"),
                 (reading.row_remap_pending, warning, "row remap pending"),
                 (reading.retired_pages_pending, warning, "pages pending retirement"))
        for value, into, words in flags:
            known = known or value is not None
            if value:
                into.append(words)
        if reading.retired_pages is not None:
            known = True
            if reading.retired_pages >= 60:
                critical.append(f"{reading.retired_pages:g} retired pages")
        increase = errors.increase if errors else {}
        if increase.get("pcie_replay", 0.0) > 80:
            warning.append("PCIe replays")
        if any(increase.get(kind, 0.0) > 0 for kind in ("nvlink_replay", "nvlink_recovery")):
            warning.append("NVLink errors")
    if not known:
        return None
    if critical:
        return "critical", tuple(critical + warning)
    return ("warning", tuple(warning)) if warning else ("ok", ())
