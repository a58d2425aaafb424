"""The GPU's plain fields as one table (monitor/infra/fields.py): each entry is whole and every
reader takes it from there, so a new field cannot be half added."""

from __future__ import annotations

import dataclasses

import pynvml
import pytest

from monitor.catalog import CATALOG
from monitor.infra import dcgm, fields, render
from monitor.infra.nvml import NvmlBackend
from monitor.infra.reading import GpuReading
from monitor.infra.replay import ReplayNvml, load_trace
from tests.conftest import FIXTURES


def test_each_entry_is_whole() -> None:
    attributes = {f.name for f in dataclasses.fields(GpuReading)}
    for field in fields.GPU_FIELDS:
        assert field.attribute in attributes, field
        assert CATALOG[field.metric].layer == "infra", field  # described, with its type, in the catalog
        if field.nvml is not None:
            assert callable(getattr(pynvml, field.nvml.function)), field  # the real binding has the call
            assert callable(getattr(ReplayNvml, field.nvml.function)), field  # and the replayed trace answers it
            assert all(isinstance(getattr(pynvml, c), int) for c in field.nvml.constants), field
        assert field.dcgm and all(unit in dcgm.TO_BASE for _, unit, _ in field.dcgm), field
    assert len({f.attribute for f in fields.GPU_FIELDS}) == len(fields.GPU_FIELDS)


def test_every_reader_takes_the_table() -> None:
    for field in fields.GPU_FIELDS:
        assert render._GPU_VALUES[field.metric] == field.attribute
        spellings = [(d.metric, d.unit, d.generation) for d in dcgm.DCGM_FIELDS if d.attribute == field.attribute]
        assert spellings == list(field.dcgm)
        assert all(metric in dcgm.WANTED for metric, _, _ in field.dcgm)


@pytest.mark.parametrize("dropped", [f.attribute for f in fields.GPU_FIELDS if f.nvml is not None])
def test_a_field_out_of_the_table_is_read_by_no_one(dropped: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVML reader reads what the table lists and nothing else of the kind: with one entry
    taken out, that field is None on the same replayed GPU, and the others keep their values."""
    class EveryField(ReplayNvml):  # the H200 trace has no health fields (not recorded): this GPU has them all
        def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
            return 2

        def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]:
            return [0x1000, 0x2000, 0x3000][:cause + 1]

        def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
            return 1

        def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
            return 7

    trace = load_trace(FIXTURES / "nvml_h200_trace.json")
    whole = NvmlBackend(EveryField(trace, clock=lambda: 0.0))
    whole.open()
    before = whole.read(0)
    kept = tuple(f for f in fields.GPU_FIELDS if f.attribute != dropped)
    monkeypatch.setattr("monitor.infra.nvml.GPU_FIELDS", kept)
    after = whole.read(0)
    assert getattr(before, dropped) is not None and getattr(after, dropped) is None
    for field in kept:
        assert getattr(after, field.attribute) == getattr(before, field.attribute)
