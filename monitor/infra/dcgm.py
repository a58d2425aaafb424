"""dcgm-exporter pages -> the same `GpuReading`s NVML gives, through one mapping table.

Both naming generations are mapped: up to 4.8.x the exporter used DCGM's legacy names with
legacy units (%, MiB, MHz, mJ); 4.9.0 renamed the defaults to DCGM 4.7's names in base units
(ratio, bytes, hertz, joules) and the driver label to DCGM_FI_SYSTEM_DRIVER_VERSION. Sources
for the 4.9 names: the dcgm-exporter 4.9.0 release notes, go-dcgm's base-unit field tests
(1603 SM_CLOCK_HERTZ, 1611 GPU_ENERGY_JOULES_TOTAL), DCGM 4.6's dcgm_fields.h deprecation
aliases (GPU_TEMP -> GPU_TEMP_CELSIUS, POWER_USAGE -> BOARD_POWER_WATTS, GR_ENGINE_ACTIVE ->
GR_ENGINE_UTIL_RATIO, ENFORCED_POWER_LIMIT -> BOARD_POWER_LIMIT_ENFORCED_WATTS) and DCGM
4.7's field reference (GPU_UTIL_RATIO 1613, FB_{CAPACITY,FREE,USED,RESERVED}_BYTES 1625-1628).

DCGM_FI_DEV_MEM_COPY_UTIL is memory *bandwidth* utilization, not memory usage: never mapped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from monitor.infra.fields import DcgmField, dcgm_fields
from monitor.infra.reading import GpuIdentity, GpuReading, GpuState, MigReading
from monitor.promtext import Page

# The exporter's unit -> base units. Divisions, not multiplications by 0.01 / 0.001, so a
# value converts exactly as NVML's path converts it.
TO_BASE: dict[str, Callable[[float], float]] = {
    "base": lambda v: v,  # already ratio, bytes, hertz, joules, watts, °C, a count or a bitmask
    "percent": lambda v: v / 100.0,
    "MiB": lambda v: v * 1048576.0,
    "MHz": lambda v: v * 1e6,
    "mJ": lambda v: v / 1000.0,
}


# Newest spelling first: when a page carries both (a custom CSV), the base-unit one wins. The
# plain fields' spellings are in their entries of fields.GPU_FIELDS; these are the others'.
DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL_RATIO", "kernel_active_ratio", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "kernel_active_ratio", "percent", "4.8"),
    DcgmField("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "graphics_engine_active_ratio", "base", "4.9"),
    DcgmField("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "graphics_engine_active_ratio", "base", "4.8"),
    DcgmField("DCGM_FI_DEV_FB_USED_BYTES", "memory_used_bytes", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_FB_USED", "memory_used_bytes", "MiB", "4.8"),
    DcgmField("DCGM_FI_DEV_FB_FREE_BYTES", "memory_free_bytes", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_FB_FREE", "memory_free_bytes", "MiB", "4.8"),
    DcgmField("DCGM_FI_DEV_FB_RESERVED_BYTES", "memory_reserved_bytes", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_FB_RESERVED", "memory_reserved_bytes", "MiB", "4.8"),
    DcgmField("DCGM_FI_DEV_FB_CAPACITY_BYTES", "memory_total_bytes", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_FB_TOTAL", "memory_total_bytes", "MiB", "4.8"),
    DcgmField("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "energy_joules", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_joules", "mJ", "4.8"),
    DcgmField("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clock_event_mask", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_event_mask", "base", "4.8"),
    # The last XID since the host engine started (0: none): a gauge that sticks. The ledger
    # (monitor/infra/ledger.py) counts its changes, so a new XID is an increase.
    DcgmField("DCGM_FI_DEV_XID_ERROR", "xid_last", "base", "4.9"),
    DcgmField("DCGM_FI_DEV_XID_ERRORS", "xid_last", "base", "4.8"),
    *dcgm_fields(),
)
# dcgm-exporter's own XID families (an `xid` label each): GpuReading attribute by family, preferred first.
XID_FAMILIES = (("DCGM_EXP_XID_ERRORS_TOTAL", "xid_totals"), ("DCGM_EXP_XID_ERRORS_COUNT", "xid_window_counts"))
WANTED = frozenset(f.metric for f in DCGM_FIELDS) | {name for name, _ in XID_FAMILIES}

# Label spellings across releases: the first one present wins.
NODE_LABELS = ("hostname", "Hostname")  # renamed in 4.6.0-4.8.3
UUID_LABELS = ("UUID", "uuid")
MODEL_LABELS = ("modelName", "model_name")
DRIVER_LABELS = ("DCGM_FI_SYSTEM_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION")  # renamed in 4.9.0
WORKLOAD_LABELS = ("pod", "namespace", "container")  # ties a GPU to the model server on it
# On a MIG GPU every sample carries GPU_I_ID; these attributes belong to the instance, the
# rest (temperature, power, clocks, energy) to the whole GPU.
# NVML has no utilization for MIG instances: their activity fields are dropped, as there.
_INSTANCE_MEMORY = {"memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes", "memory_total_bytes"}
_PER_INSTANCE = {*_INSTANCE_MEMORY, "kernel_active_ratio", "graphics_engine_active_ratio"}
_GPU_ATTRIBUTES = {f.name for f in fields(GpuReading)}


@dataclass
class _Values:
    values: dict[str, float] = field(default_factory=dict)
    workload: dict[str, str] = field(default_factory=dict)
    profile: str = ""


@dataclass
class _Device:
    identity: dict[str, str] = field(default_factory=dict)
    gpu: _Values = field(default_factory=_Values)
    instances: dict[str, _Values] = field(default_factory=dict)
    xids: dict[str, dict[str, float]] = field(default_factory=dict)  # GpuReading attribute -> {xid: count}


def page_to_states(page: Page, source: str) -> list[GpuState]:
    """Every GPU on a parsed dcgm-exporter page; the node defaults to the target's name."""
    devices: dict[tuple[str, str], _Device] = {}
    for spec in DCGM_FIELDS:
        for labels, value in page.series(spec.metric).items():
            if math.isfinite(value):
                _place(devices, spec, dict(labels), value, source)
    for name, attribute in XID_FAMILIES:
        for labels, value in page.series(name).items():
            _place_xid(devices, attribute, dict(labels), value, source)
    return [_state(node, gpu, device, source) for (node, gpu), device in sorted(devices.items(), key=_order)]


def _place(devices: dict[tuple[str, str], _Device], spec: DcgmField, labels: dict[str, str], value: float,
           source: str) -> None:
    gpu = labels.get("gpu")
    if gpu is None:
        return  # not a GPU entity (NVSwitch, link, CPU)
    device = devices.setdefault((_first(labels, NODE_LABELS) or source, gpu), _Device())
    for key, names in (("uuid", UUID_LABELS), ("model", MODEL_LABELS), ("driver", DRIVER_LABELS)):
        if not device.identity.get(key):
            device.identity[key] = _first(labels, names)
    instance = labels.get("GPU_I_ID")
    if instance is None:
        _put(device.gpu, spec, labels, value)
    elif spec.attribute in _INSTANCE_MEMORY:
        _put(_instance(device, instance, labels), spec, labels, value)
    elif spec.attribute not in _PER_INSTANCE:
        # A device-wide field seen through an instance: the value is the GPU's, the pod the instance's.
        _put(device.gpu, spec, {}, value)
        if any(labels.get(name) for name in WORKLOAD_LABELS):
            _put(_instance(device, instance, labels), None, labels, value)


def _place_xid(devices: dict[tuple[str, str], _Device], attribute: str, labels: dict[str, str], value: float,
               source: str) -> None:
    gpu, xid = labels.get("gpu"), labels.get("xid")
    if gpu is None or not xid or not math.isfinite(value):
        return
    device = devices.setdefault((_first(labels, NODE_LABELS) or source, gpu), _Device())
    counts = device.xids.setdefault(attribute, {})
    counts[xid] = max(counts.get(xid, 0.0), value)  # an XID is the GPU's: the same on each MIG instance


def _instance(device: _Device, instance: str, labels: dict[str, str]) -> _Values:
    return device.instances.setdefault(instance, _Values(profile=labels.get("GPU_I_PROFILE", "")))


def _put(holder: _Values, spec: DcgmField | None, labels: dict[str, str], value: float) -> None:
    if spec is not None:
        holder.values.setdefault(spec.attribute, TO_BASE[spec.unit](value))
    for name in WORKLOAD_LABELS:
        if labels.get(name):
            holder.workload.setdefault(name, labels[name])


def _state(node: str, gpu: str, device: _Device, source: str) -> GpuState:
    identity = GpuIdentity(int(gpu) if gpu.isdigit() else -1, device.identity.get("uuid", ""),
                           device.identity.get("model", ""), device.identity.get("driver", ""))
    values = _with_total(device.gpu.values)
    mig = tuple(_mig(instance, v) for instance, v in sorted(device.instances.items(), key=lambda i: _number(i[0])))
    reading_values: dict[str, Any] = {k: v for k, v in values.items() if k in _GPU_ATTRIBUTES}
    if "clock_event_mask" in reading_values:
        reading_values["clock_event_mask"] = int(reading_values["clock_event_mask"])
    reading_values.update(device.xids)  # xid_totals / xid_window_counts, where the page has them
    reading = GpuReading(**reading_values, mig=mig, workload=dict(device.gpu.workload))
    return GpuState(node, gpu, source, up=True, identity=identity, reading=reading)


def _mig(instance: str, values: _Values) -> MigReading:
    memory = _with_total(values.values)
    return MigReading(instance, values.profile, memory.get("memory_used_bytes"), memory.get("memory_total_bytes"),
                      workload=dict(values.workload))


def _with_total(values: dict[str, float]) -> dict[str, float]:
    # The default 4.8 set has no FB_TOTAL: total = used + free + reserved (NVML v2's identity).
    if "memory_total_bytes" not in values and "memory_used_bytes" in values and "memory_free_bytes" in values:
        reserved = values.get("memory_reserved_bytes", 0.0)
        return {**values, "memory_total_bytes": values["memory_used_bytes"] + values["memory_free_bytes"] + reserved}
    return values


def _first(labels: dict[str, str], names: tuple[str, ...]) -> str:
    return next((labels[name] for name in names if labels.get(name)), "")


def _number(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def _order(item: tuple[tuple[str, str], _Device]) -> tuple[str, tuple[int, str]]:
    (node, gpu), _ = item
    return node, _number(gpu)
