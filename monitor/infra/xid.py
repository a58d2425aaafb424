"""NVML's XID events, on their own thread: the driver hands each XID to an event set.

    nvmlEventSetCreate -> nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, set) per GPU
    -> nvmlEventSetWait_v2(set, wait_ms) in a loop -> the XID (eventData) queued for its GPU

The wait blocks by design (up to `wait_ms`, forever on a wedged driver), so it never runs on the
polling workers: one daemon thread waits, and each GPU's read takes what arrived for it since the
last read. The wait is short (`wait_ms`) so that a stop is quick; a timeout is not an error.
A GPU that cannot register (NOT_SUPPORTED: no event API for it) has no XID events
(`None`, not an empty tuple): its XID series are absent, not zero.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("monitor.infra")


def handle_key(handle: Any) -> Any:
    """A handle as a dict key: the device pointer's address (the event's `device` is a new ctypes
    object for the same GPU), or the handle itself (the replay's and the fakes' handles)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class XidListener:
    def __init__(self, nvml: Any, is_absent: Callable[[Exception], bool], wait_ms: int = 100) -> None:
        self.nvml = nvml
        self.is_absent = is_absent  # NOT_SUPPORTED and the like: the GPU has no event API
        self.wait_ms = wait_ms
        self._lock = threading.Lock()
        self._queued: dict[int, list[int]] = {}  # GPU index -> XIDs not yet read
        self._index: dict[Any, int] = {}
        self._set: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # the last failed wait, for the status page

    def start(self, handles: dict[int, Any]) -> None:
        """Register every GPU that supports XID events; start waiting if one does."""
        nvml = self.nvml
        if not hasattr(nvml, "nvmlEventSetCreate") or self._set is not None:
            return  # no event API, or already waiting (an open after a close starts afresh)
        self._stop.clear()
        self._index, self._queued = {}, {}
        try:
            self._set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            if not self.is_absent(exc):
                raise
            return
        for index, handle in handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._set)
            except nvml.NVMLError as exc:
                if not self.is_absent(exc):
                    raise
                continue
            self._index[handle_key(handle)] = index
            self._queued[index] = []
        if self._queued:
            self._thread = threading.Thread(target=self._loop, name="infermon-nvml-xid", daemon=True)
            self._thread.start()

    def take(self, index: int) -> tuple[int, ...] | None:
        """The XIDs of this GPU since the last call; None where it has no event API."""
        with self._lock:
            queued = self._queued.get(index)
            if queued is None:
                return None
            self._queued[index] = []
        return tuple(queued)

    def _loop(self) -> None:
        nvml = self.nvml
        timeout = getattr(nvml, "NVML_ERROR_TIMEOUT", None)
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, self.wait_ms)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != timeout:
                    self.error = type(exc).__name__
                    self._stop.wait(1.0)  # a failing wait must not spin
                continue
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            index = self._index.get(handle_key(data.device))
            if index is None:
                continue
            with self._lock:
                self._queued[index].append(int(data.eventData))

    def stop(self) -> None:
        """Stop waiting and free the set; a thread stuck in the driver is left behind (a daemon)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(2 * self.wait_ms / 1000.0)  # short: close() runs under the infra timeout
            if thread.is_alive():
                log.warning("NVML XID wait did not return: leaving its thread behind")
                return
        if self._set is not None:
            try:
                self.nvml.nvmlEventSetFree(self._set)
            except self.nvml.NVMLError as exc:
                log.warning("NVML event set not freed: %s", type(exc).__name__)
            self._set = None
