"""The vLLM families of the simulator's serving shapes (monitor.sim.tiers), added to its page only
when the engine has the shape, as vLLM adds them only with a KV connector configured.

    host tier   the OffloadingConnector's (vllm/distributed/kv_transfer/kv_connector/v1/offloading):
                load/store bytes and seconds (counters) and sizes (histograms, bytes), and the
                deprecated transfer_type-labelled triple it still prints for the CPU tier
    P/D split   the NixlConnector's: transfer time and bytes per transfer (histograms), failed transfers

vLLM prints no per-operation swap-back latency (only seconds summed over operations) and no MoE
balancedness: those are SGLang's (monitor.sim.sglang_metrics).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from monitor.sim.stats import IterationStats
from monitor.sim.tiers import TierOp

TRANSFER_SIZE_BYTES = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6]
NIXL_XFER_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
NIXL_BYTES = [float(2 ** (10 + i)) for i in range(1, 25, 2)]  # 2 KiB .. 8 GiB
LOAD, STORE = "CPU_to_GPU", "GPU_to_CPU"


class OffloadFamilies:
    """vLLM's CPU offloading connector: what each swap-back (load) and store moved and took."""

    def __init__(self, registry: CollectorRegistry, labels: tuple[str, ...], labelnames: tuple[str, ...]) -> None:
        self._labels = labels
        with_type = (*labelnames, "transfer_type")
        self._bytes = {"load": Counter("vllm:kv_offload_load_bytes", "Total bytes loaded from offload storage to GPU.",
                                       labelnames, registry=registry),
                       "store": Counter("vllm:kv_offload_store_bytes",
                                        "Total bytes stored from GPU to offload storage.", labelnames,
                                        registry=registry)}
        self._time = {"load": Counter("vllm:kv_offload_load_time",
                                      "Total load time from offload storage to GPU, in seconds.", labelnames,
                                      registry=registry),
                      "store": Counter("vllm:kv_offload_store_time",
                                       "Total store time from GPU to offload storage, in seconds.", labelnames,
                                       registry=registry)}
        self._size = {"load": Histogram("vllm:kv_offload_load_size",
                                        "Histogram of KV offload load operation size, in bytes.", labelnames,
                                        buckets=TRANSFER_SIZE_BYTES, registry=registry),
                      "store": Histogram("vllm:kv_offload_store_size",
                                         "Histogram of KV offload store operation size, in bytes.", labelnames,
                                         buckets=TRANSFER_SIZE_BYTES, registry=registry)}
        self._old_bytes = Counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector",
                                  with_type, registry=registry)
        self._old_time = Counter("vllm:kv_offload_total_time", "Total time measured by all KV offloading operations",
                                 with_type, registry=registry)
        self._old_size = Histogram("vllm:kv_offload_size", "Histogram of KV offload transfer size, in bytes.",
                                   with_type, buckets=TRANSFER_SIZE_BYTES, registry=registry)
        for family in (*self._bytes.values(), *self._time.values(), *self._size.values()):
            family.labels(*labels)
        for transfer_type in (LOAD, STORE):
            for family in (self._old_bytes, self._old_time, self._old_size):
                family.labels(*labels, transfer_type)

    def record(self, stats: IterationStats) -> None:
        for op in stats.kv_loads:
            self._observe("load", LOAD, op)
        for op in stats.kv_stores:
            self._observe("store", STORE, op)

    def _observe(self, way: str, transfer_type: str, op: TierOp) -> None:
        self._bytes[way].labels(*self._labels).inc(op.bytes)
        self._time[way].labels(*self._labels).inc(op.seconds)
        self._size[way].labels(*self._labels).observe(op.bytes)
        self._old_bytes.labels(*self._labels, transfer_type).inc(op.bytes)
        self._old_time.labels(*self._labels, transfer_type).inc(op.seconds)
        self._old_size.labels(*self._labels, transfer_type).observe(op.bytes)


class NixlFamilies:
    """vLLM's NixlConnector on the decode instance: each KV transfer's time and size, the failures."""

    def __init__(self, registry: CollectorRegistry, labels: tuple[str, ...], labelnames: tuple[str, ...]) -> None:
        self._labels = labels
        self._time = Histogram("vllm:nixl_xfer_time_seconds",
                               "Histogram of transfer duration for NIXL KV Cache transfers.", labelnames,
                               buckets=NIXL_XFER_SECONDS, registry=registry)
        self._bytes = Histogram("vllm:nixl_bytes_transferred",
                                "Histogram of bytes transferred per NIXL KV Cache transfers.", labelnames,
                                buckets=NIXL_BYTES, registry=registry)
        self._failed = Counter("vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers.",
                               labelnames, registry=registry)
        self._failed_notifications = Counter("vllm:nixl_num_failed_notifications",
                                             "Number of failed NIXL KV Cache notifications.", labelnames,
                                             registry=registry)
        for family in (self._time, self._bytes, self._failed, self._failed_notifications):
            family.labels(*labels)

    def record(self, stats: IterationStats) -> None:
        for op in stats.pd_transfers:
            self._time.labels(*self._labels).observe(op.seconds)
            self._bytes.labels(*self._labels).observe(op.bytes)
        if stats.pd_failed:
            self._failed.labels(*self._labels).inc(stats.pd_failed)
