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
    count: bool = False  # the call answers a list (retired pages): the value is its length


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
    # GPU health. dcgm-exporter's CSV names them as DCGM did up to 4.6 (its rows are commented out
    # by default, but for the remapped rows, the row-remap failure and PCIe replays); DCGM 4.7's
    # dcgm_fields.h spells 202, 390-396 and the NVLink totals as the "4.9" names here. ECC and the
    # pending flag kept their names. NVML: a GPU without page retirement (Ampere and newer) or
    # without ECC answers NOT_SUPPORTED: the field is absent.
    GpuField("ecc_corrected_errors", "inference_gpu_ecc_corrected_errors_total",
             NvmlCall("nvmlDeviceGetTotalEccErrors", ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC")),
             (("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "base", "4.8"),)),
    GpuField("retired_pages_sbe", "inference_gpu_retired_pages_sbe",
             NvmlCall("nvmlDeviceGetRetiredPages", ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",),
                      count=True),
             (("DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", "base", "4.9"), ("DCGM_FI_DEV_RETIRED_SBE", "base", "4.8"))),
    GpuField("retired_pages_dbe", "inference_gpu_retired_pages_dbe",
             NvmlCall("nvmlDeviceGetRetiredPages", ("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",), count=True),
             (("DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL", "base", "4.9"), ("DCGM_FI_DEV_RETIRED_DBE", "base", "4.8"))),
    GpuField("retired_pages_pending", "inference_gpu_retired_pages_pending",
             NvmlCall("nvmlDeviceGetRetiredPagesPendingStatus"),
             (("DCGM_FI_DEV_PAGE_RETIRED_PENDING", "base", "4.9"), ("DCGM_FI_DEV_RETIRED_PENDING", "base", "4.8"))),
    GpuField("pcie_replay_errors", "inference_gpu_pcie_replay_errors_total",
             NvmlCall("nvmlDeviceGetPcieReplayCounter"),
             (("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "base", "4.9"), ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "base", "4.8"))),
    # One NVML call answers all four (nvmlDeviceGetRemappedRows, in nvml.py); dcgm-exporter has one field each.
    GpuField("row_remap_correctable_rows", "inference_gpu_row_remap_correctable_rows", None,
             (("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", "base", "4.9"),
              ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "base", "4.8"))),
    GpuField("row_remap_uncorrectable_rows", "inference_gpu_row_remap_uncorrectable_rows", None,
             (("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "base", "4.9"),
              ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "base", "4.8"))),
    GpuField("row_remap_pending", "inference_gpu_row_remap_pending", None,
             (("DCGM_FI_DEV_ROW_REMAP_PENDING", "base", "4.8"),)),
    GpuField("row_remap_failed", "inference_gpu_row_remap_failed", None,
             (("DCGM_FI_DEV_ROW_REMAP_FAILED", "base", "4.9"), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "base", "4.8"))),
    # NVML counts per link (nvmlDeviceGetNvLinkErrorCounter, summed in nvml.py on the slow interval).
    GpuField("nvlink_crc_flit_errors", "inference_gpu_nvlink_crc_flit_errors_total", None,
             (("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", "base", "4.9"),
              ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "base", "4.8"))),
    GpuField("nvlink_crc_data_errors", "inference_gpu_nvlink_crc_data_errors_total", None,
             (("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", "base", "4.9"),
              ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "base", "4.8"))),
    GpuField("nvlink_replay_errors", "inference_gpu_nvlink_replay_errors_total", None,
             (("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", "base", "4.9"),
              ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "base", "4.8"))),
    GpuField("nvlink_recovery_errors", "inference_gpu_nvlink_recovery_errors_total", None,
             (("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", "base", "4.9"),
              ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "base", "4.8"))),
)


def dcgm_fields(fields: tuple[GpuField, ...] = GPU_FIELDS) -> tuple[DcgmField, ...]:
    """The table's dcgm-exporter spellings, each field's newest first."""
    return tuple(DcgmField(metric, field.attribute, unit, generation)
                 for field in fields for metric, unit, generation in field.dcgm)
