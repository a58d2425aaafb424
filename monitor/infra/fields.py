"""The GPU's plain fields as one table, as dcgm-exporter has its CSV: one entry a field.

A plain field is one number of one GPU, read by one NVML call with fixed arguments and scaled to
base units, or taken from one of dcgm-exporter's spellings of it. Its entry names where the
value lands (`GpuReading`'s attribute), the metric it is exported as (described in
`monitor/catalog.py`), the NVML call and the dcgm-exporter fields. The NVML reader, the
dcgm-exporter reader and the renderer read this table, so a new plain field is a `GpuReading`
attribute, an entry here and its line in the catalog (and, for a call the replayed trace does not
answer yet, its method in `replay.py`).

The fields read in another way stay with their readers: utilization (one struct, two sources),
memory (NVML memory v2 or v1), energy and MIG (read on the slow interval), the clock-event
bitmask (two spellings of the call).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DcgmField:
    metric: str  # the exporter's metric name
    attribute: str  # GpuReading attribute it fills (memory_free_bytes only derives the total)
    unit: str  # a key of dcgm.TO_BASE
    generation: str  # "4.8": legacy names/units (<= 4.8.x); "4.9": DCGM 4.7 names, base units


@dataclass(frozen=True)
class NvmlCall:
    """`nvml.<function>(handle, *(nvml.<constant> for constant in constants))`, then `/ divide`
    and `* multiply` (each exact for 1.0), as the reader converted it before the table."""

    function: str
    constants: tuple[str, ...] = ()
    divide: float = 1.0
    multiply: float = 1.0


@dataclass(frozen=True)
class GpuField:
    attribute: str  # GpuReading attribute
    metric: str  # our metric (its type and help are in monitor/catalog.py)
    nvml: NvmlCall | None  # None: dcgm-exporter only
    dcgm: tuple[tuple[str, str, str], ...]  # (exporter metric, unit, generation), newest spelling first


# In the order NVML is asked (after utilization, before the clock events), as before the table.
GPU_FIELDS: tuple[GpuField, ...] = (
    GpuField("power_watts", "inference_gpu_power_watts",
             NvmlCall("nvmlDeviceGetPowerUsage", divide=1000.0),  # mW
             (("DCGM_FI_DEV_BOARD_POWER_WATTS", "base", "4.9"), ("DCGM_FI_DEV_POWER_USAGE", "base", "4.8"))),
    GpuField("power_limit_watts", "inference_gpu_power_limit_watts",
             NvmlCall("nvmlDeviceGetEnforcedPowerLimit", divide=1000.0),  # mW
             (("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", "base", "4.9"),
              ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "base", "4.8"))),
    GpuField("sm_clock_hertz", "inference_gpu_sm_clock_hertz",
             NvmlCall("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",), multiply=1e6),  # MHz
             (("DCGM_FI_DEV_SM_CLOCK_HERTZ", "base", "4.9"), ("DCGM_FI_DEV_SM_CLOCK", "MHz", "4.8"))),
    # Not renamed by DCGM 4.7; commented out in both generations' default CSV.
    GpuField("ecc_uncorrected_errors", "inference_gpu_ecc_uncorrected_errors_total",
             NvmlCall("nvmlDeviceGetTotalEccErrors", ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC")),
             (("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "base", "4.8"),)),
    GpuField("temperature_celsius", "inference_gpu_temperature_celsius",
             NvmlCall("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
             (("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "base", "4.9"), ("DCGM_FI_DEV_GPU_TEMP", "base", "4.8"))),
)


def dcgm_fields(fields: tuple[GpuField, ...] = GPU_FIELDS) -> tuple[DcgmField, ...]:
    """The table's dcgm-exporter spellings, each field's newest first."""
    return tuple(DcgmField(metric, field.attribute, unit, generation)
                 for field in fields for metric, unit, generation in field.dcgm)
