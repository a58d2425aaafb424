"""An Alertmanager v4 webhook body, as Alertmanager posts it to a receiver."""

from __future__ import annotations

from typing import Any


def am_payload(status: str = "firing", **labels: str) -> dict[str, Any]:
    alert_labels = {"alertname": "GPUHot", "severity": "critical", **labels}
    return {
        "version": "4", "groupKey": '{}:{alertname="GPUHot"}', "truncatedAlerts": 0, "status": status,
        "receiver": "infermon", "groupLabels": {"alertname": "GPUHot"}, "commonLabels": alert_labels,
        "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
        "alerts": [{
            "status": status, "labels": alert_labels, "annotations": {"summary": "GPU 3 is at 87 °C"},
            "startsAt": "2026-11-30T12:00:00.123456789Z",
            "endsAt": "2026-11-30T12:05:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": "0000000000000000",
        }],
    }
