"""Generic webhook: Alertmanager's v4 JSON payload, so anything that takes Alertmanager webhooks works.

{"version": "4", "status": "firing", "receiver": "ops", "groupKey": "{}:{alertname=\\"GPUHot\\"}",
 "truncatedAlerts": 0, "groupLabels": {...}, "commonLabels": {...}, "commonAnnotations": {...},
 "externalURL": "http://monitor:9480",
 "alerts": [{"status": "firing", "labels": {...}, "annotations": {...},
             "startsAt": "2026-11-30T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
             "generatorURL": "...", "fingerprint": "c4f0e1b3a7d2f9e8"}]}
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from monitor.alerting.model import Alert
from monitor.alerting.receivers.base import DigestMessage, HttpReceiver, Notification

ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time, which Alertmanager writes as endsAt while firing


def rfc3339(moment: datetime | None) -> str:
    if moment is None:
        return ZERO_TIME
    return moment.isoformat().replace("+00:00", "Z")


def group_key(group_labels: dict[str, str] | Any) -> str:
    pairs = ", ".join(f'{k}="{group_labels[k]}"' for k in sorted(group_labels))
    return "{}:{" + pairs + "}"


def alert_json(alert: Alert) -> dict[str, Any]:
    return {
        "status": alert.status,
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "startsAt": rfc3339(alert.starts_at),
        "endsAt": rfc3339(alert.ends_at),
        "generatorURL": alert.generator_url,
        "fingerprint": alert.fingerprint,
    }


def payload(notification: Notification) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": group_key(notification.group_labels),
        "truncatedAlerts": notification.truncated_alerts,
        "status": notification.status,
        "receiver": notification.receiver,
        "groupLabels": dict(notification.group_labels),
        "commonLabels": notification.common("labels"),
        "commonAnnotations": notification.common("annotations"),
        "externalURL": notification.external_url,
        "alerts": [alert_json(a) for a in notification.alerts],
    }


class WebhookReceiver(HttpReceiver):
    def body(self, notification: Notification) -> dict[str, Any]:
        return payload(notification)

    def digest_body(self, digest: DigestMessage) -> dict[str, Any]:
        return dict(digest.document)  # as `infermon digest --json` writes it

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token.reveal()}"} if self.token else {}
