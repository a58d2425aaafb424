"""The error ledger (monitor/infra/ledger.py): XIDs as counted events that leave their window,
error counters as increases with Prometheus' reset handling."""

from __future__ import annotations

from monitor.infra.ledger import ERROR_WINDOW, XID_WINDOW, ErrorLedger, increase_of
from monitor.infra.reading import GpuReading, GpuState


def state(reading: GpuReading | None, up: bool = True) -> GpuState:
    return GpuState("n1", "0", "dcgm-a", up=up, reading=reading)


def run(readings: list[tuple[float, GpuReading | None]]) -> list[GpuState]:
    ledger = ErrorLedger()
    return [ledger.update([state(r, up=r is not None)], now)[0] for now, r in readings]


def test_dcgm_last_xid_counts_changes_not_scrapes() -> None:
    # The gauge holds 48 for three scrapes, then shows 79: two events, not four.
    seen = run([(0, GpuReading(xid_last=0)), (5, GpuReading(xid_last=48)), (10, GpuReading(xid_last=48)),
                (15, GpuReading(xid_last=48)), (20, GpuReading(xid_last=79))])
    assert seen[0].errors is None  # no XID ever: no series
    last = seen[-1].errors
    assert last is not None and last.xid_total == {"48": 1.0, "79": 1.0}
    assert last.faults == ("XID 48", "XID 79")


def test_first_nonzero_xid_counts_once_and_a_return_to_it_counts_again() -> None:
    seen = run([(0, GpuReading(xid_last=48)), (5, GpuReading(xid_last=13)), (10, GpuReading(xid_last=48))])
    errors = seen[-1].errors
    assert errors is not None and errors.xid_total == {"48": 2.0, "13": 1.0}


def test_xids_leave_the_window_and_the_counter_stays() -> None:
    hour = XID_WINDOW[1]
    seen = run([(0, GpuReading(xid_events=(48,))), (hour - 1, GpuReading(xid_events=())),
                (hour + 1, GpuReading(xid_events=()))])
    assert seen[1].errors is not None and seen[1].errors.xid_recent == {"48": 1.0}
    assert seen[2].errors is not None and seen[2].errors.xid_recent == {"48": 0.0}
    assert seen[2].errors.xid_total == {"48": 1.0}


def test_xids_survive_a_gpu_going_down() -> None:
    seen = run([(0, GpuReading(xid_events=(79,))), (5, None)])
    assert seen[1].errors is not None and seen[1].errors.xid_recent == {"79": 1.0}


def test_counter_increase_over_the_window_with_a_reset() -> None:
    window = ERROR_WINDOW[1]
    # 0 -> 5 -> (GPU reset) 2 -> 4: increase 5 + 2 + 2 = 9, as Prometheus' increase() counts a reset.
    seen = run([(0, GpuReading(pcie_replay_errors=0)), (60, GpuReading(pcie_replay_errors=5)),
                (120, GpuReading(pcie_replay_errors=2)), (180, GpuReading(pcie_replay_errors=4))])
    errors = seen[-1].errors
    assert errors is not None and errors.increase == {"pcie_replay": 9.0}
    # Past the window the old samples drop out: only what came in the last `window` counts.
    later = ErrorLedger()
    for now, count in ((0, 0.0), (60, 50.0), (60 + window, 50.0), (120 + window, 53.0)):
        result = later.update([state(GpuReading(pcie_replay_errors=count))], now)[0]
    assert result.errors is not None and result.errors.increase == {"pcie_replay": 3.0}


def test_increase_of_matches_prometheus_on_resets() -> None:
    assert increase_of([(0, 10.0), (1, 12.0), (2, 1.0), (3, 3.0)]) == 2 + 1 + 2
    assert increase_of([(0, 7.0)]) == 0.0


def test_a_gpu_reset_ends_its_xids() -> None:
    # XID 48 with its pending remap; the operator drains and resets: the pending flag and the volatile
    # count drop, and the XID leaves the window at once (its alert resolves), while the counter keeps it.
    seen = run([(0, GpuReading(xid_events=(48,), ecc_uncorrected_errors=1, row_remap_pending=1)),
                (60, GpuReading(xid_events=(), ecc_uncorrected_errors=1, row_remap_pending=1)),
                (120, GpuReading(xid_events=(), ecc_uncorrected_errors=0, row_remap_pending=0))])
    assert seen[1].errors is not None and seen[1].errors.xid_recent == {"48": 1.0}
    assert seen[2].errors is not None and seen[2].errors.xid_recent == {"48": 0.0}
    assert seen[2].errors.xid_total == {"48": 1.0}


def test_dcgm_exporter_xid_counts_are_counted_by_their_increase() -> None:
    # DCGM_EXP_XID_ERRORS_TOTAL: first sight counts whole, then increases; a drop is an exporter restart.
    totals = run([(0, GpuReading(xid_totals={"48": 2.0}, xid_last=48)), (5, GpuReading(xid_totals={"48": 2.0})),
                  (10, GpuReading(xid_totals={"48": 3.0, "94": 1.0})), (15, GpuReading(xid_totals={"48": 1.0}))])
    errors = totals[-1].errors
    assert errors is not None and errors.xid_total == {"48": 2.0 + 1.0 + 1.0, "94": 1.0}  # not the gauge's too
    # DCGM_EXP_XID_ERRORS_COUNT over the exporter's window: a drop is an old XID leaving it, not a new one.
    window = run([(0, GpuReading(xid_window_counts={"31": 2.0})), (5, GpuReading(xid_window_counts={"31": 1.0})),
                  (10, GpuReading(xid_window_counts={"31": 2.0}))])
    assert window[-1].errors is not None and window[-1].errors.xid_total == {"31": 3.0}
