"""InfraView -> metric families (fresh each scrape of /metrics; no I/O, no state kept).

A GPU that is down keeps only `inference_gpu_up 0` and its `inference_gpu_info`; a field the
GPU does not support has no series at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import Metric

from monitor.catalog import CATALOG, family
from monitor.infra.fields import GPU_FIELDS
from monitor.infra.ledger import ERROR_WINDOW, XID_WINDOW
from monitor.infra.reading import CLOCK_EVENT_REASONS, GpuErrors, GpuReading, GpuState, InfraView, MigReading

# Our metric -> GpuReading attribute (or property), per {node, gpu}: the fields read in their own
# way and the derived ratios here, the plain fields from their table; in the catalog's order.
_OWN_VALUES = {
    "inference_gpu_utilization_ratio": "utilization_ratio",
    "inference_gpu_kernel_active_ratio": "kernel_active_ratio",
    "inference_gpu_graphics_engine_active_ratio": "graphics_engine_active_ratio",
    "inference_gpu_memory_used_bytes": "memory_used_bytes",
    "inference_gpu_memory_total_bytes": "memory_total_bytes",
    "inference_gpu_memory_reserved_bytes": "memory_reserved_bytes",
    "inference_gpu_memory_used_ratio": "memory_used_ratio",
    "inference_gpu_power_used_ratio": "power_used_ratio",
    "inference_gpu_energy_joules_total": "energy_joules",
    "inference_gpu_retired_pages": "retired_pages",
}
_ATTRIBUTES = {**_OWN_VALUES, **{f.metric: f.attribute for f in GPU_FIELDS}}
_GPU_VALUES = {name: _ATTRIBUTES[name] for name in CATALOG if name in _ATTRIBUTES}
# Per MIG GPU instance, {node, gpu, gpu_instance, profile}.
_MIG_VALUES = {
    "inference_gpu_mig_memory_used_bytes": "memory_used_bytes",
    "inference_gpu_mig_memory_total_bytes": "memory_total_bytes",
}
_REASONS = tuple(CLOCK_EVENT_REASONS.items())


def render_infra(view: InfraView) -> Iterator[Metric]:
    up, info, workload = family("inference_gpu_up"), family("inference_gpu_info"), family("inference_gpu_workload_info")
    values = {name: family(name) for name in _GPU_VALUES}
    mig = {name: family(name) for name in (*_MIG_VALUES, "inference_gpu_mig_memory_used_ratio")}
    reasons = family("inference_gpu_clock_event_active")
    errors = {name: family(name) for name in _ERROR_FAMILIES}
    for gpu in view.gpus:
        labels = {"node": gpu.node, "gpu": gpu.gpu}
        up.add_sample("inference_gpu_up", labels, 1.0 if gpu.up else 0.0)
        _info(info, gpu, labels)
        if gpu.errors is not None:
            _errors(errors, gpu.errors, labels, gpu.up)  # XIDs stay while it is down: XID 79 is why it is
        if not gpu.up or gpu.reading is None:
            continue  # a lost or unreadable GPU: no stale numbers
        _values(values, gpu.reading, labels)
        _reasons(reasons, gpu.reading, labels)
        _workload(workload, gpu.reading.workload, labels)
        for instance in gpu.reading.mig:
            _mig(mig, workload, instance, labels)
    yield up
    yield info
    yield from values.values()
    yield reasons
    yield from errors.values()
    yield from mig.values()
    yield workload


def _info(info: Metric, gpu: GpuState, labels: dict[str, str]) -> None:
    identity = gpu.identity
    if identity is None or not (identity.uuid or identity.model):
        return
    info.add_sample("inference_gpu_info",
                    {**labels, "uuid": identity.uuid, "model": identity.model, "driver": identity.driver}, 1.0)


def _values(values: dict[str, Metric], reading: GpuReading, labels: dict[str, str]) -> None:
    # The same labels dict is shared by every sample of this GPU: samples never mutate it.
    for name, attribute in _GPU_VALUES.items():
        value = getattr(reading, attribute)
        if value is not None:
            values[name].add_sample(name, labels, value)


_ERROR_FAMILIES = ("inference_gpu_xid_errors_total", "inference_gpu_xid_events", "inference_gpu_errors_increase")


def _errors(families: dict[str, Metric], errors: GpuErrors, labels: dict[str, str], up: bool) -> None:
    for xid, count in errors.xid_total.items():
        families["inference_gpu_xid_errors_total"].add_sample("inference_gpu_xid_errors_total",
                                                              {**labels, "xid": xid}, count)
        recent = errors.xid_recent.get(xid, 0.0)
        families["inference_gpu_xid_events"].add_sample(
            "inference_gpu_xid_events", {**labels, "xid": xid, "window": XID_WINDOW[0]}, recent)
    if not up:
        return  # the counters of a GPU that was not read: no stale increase
    for kind, value in errors.increase.items():
        families["inference_gpu_errors_increase"].add_sample(
            "inference_gpu_errors_increase", {**labels, "kind": kind, "window": ERROR_WINDOW[0]}, value)


def _reasons(reasons: Metric, reading: GpuReading, labels: dict[str, str]) -> None:
    mask = reading.clock_event_mask
    if mask is None:
        return
    for reason, bit in _REASONS:
        reasons.add_sample("inference_gpu_clock_event_active", {**labels, "reason": reason}, 1.0 if mask & bit else 0.0)


def _mig(mig: dict[str, Metric], workload: Metric, instance: MigReading, gpu_labels: dict[str, str]) -> None:
    labels = {**gpu_labels, "gpu_instance": instance.instance, "profile": instance.profile}
    for name, attribute in _MIG_VALUES.items():
        value = getattr(instance, attribute)
        if value is not None:
            mig[name].add_sample(name, labels, value)
    if instance.memory_used_bytes is not None and instance.memory_total_bytes:
        ratio = instance.memory_used_bytes / instance.memory_total_bytes
        mig["inference_gpu_mig_memory_used_ratio"].add_sample("inference_gpu_mig_memory_used_ratio", labels, ratio)
    _workload(workload, instance.workload, {**gpu_labels, "gpu_instance": instance.instance})


def _workload(workload: Metric, pod: Mapping[str, str], labels: dict[str, str]) -> None:
    if pod:
        workload.add_sample("inference_gpu_workload_info", {**labels, **pod}, 1.0)
