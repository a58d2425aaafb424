"""The shared alert shape: fingerprints equal Alertmanager's (prometheus/common LabelSet.Fingerprint)."""

from __future__ import annotations

from datetime import UTC, datetime

from monitor.alerting.model import Alert, fingerprint


def test_fingerprint_matches_prometheus_common() -> None:
    # FNV-1a 64 offset basis: the fingerprint of the empty label set in prometheus/common.
    assert fingerprint({}) == "cbf29ce484222325"
    # Independent of insertion order, sensitive to every name and value.
    a = fingerprint({"alertname": "GPUHot", "gpu": "0"})
    assert a == fingerprint({"gpu": "0", "alertname": "GPUHot"})
    assert a != fingerprint({"alertname": "GPUHot", "gpu": "1"})
    assert len(a) == 16 and int(a, 16) >= 0


def test_status_follows_ends_at() -> None:
    start = datetime(2026, 11, 30, tzinfo=UTC)
    firing = Alert({"alertname": "X"}, {}, start)
    assert firing.status == "firing" and firing.fingerprint == fingerprint({"alertname": "X"})
    assert Alert({"alertname": "X"}, {}, start, ends_at=start).status == "resolved"
