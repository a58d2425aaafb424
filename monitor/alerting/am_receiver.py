"""`POST /api/v1/alertmanager`: Alertmanager's webhook, fanned out through the outbox.

Alertmanager delivers at least once and retries on 5xx, so: answer 2xx only once the
transitions are persisted, 503 when the database cannot take them, and store each transition
once (a payload posted twice becomes one message). The bearer token is required when
`api.token` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Literal

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from sqlalchemy.exc import SQLAlchemyError

from monitor.alerting.delivery import Delivery
from monitor.alerting.explain import CONTEXT, PROBABLE_CAUSE
from monitor.alerting.model import Alert
from monitor.auth import bearer_guard

log = logging.getLogger("monitor.alerting.receiver")


class AmAlert(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime  # Alertmanager's field names
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str = ""


class AmPayload(BaseModel):
    """Alertmanager's webhook body (version 4); the group fields are not needed to fan out."""

    model_config = ConfigDict(extra="ignore")

    version: str = "4"
    status: str = ""
    receiver: str = ""
    alerts: list[AmAlert]


def to_alerts(payload: AmPayload) -> list[Alert]:
    """Our alerts, fingerprinted by us (a test checks we agree with Alertmanager's)."""
    return [
        Alert(
            labels=a.labels,
            annotations=a.annotations,
            starts_at=a.startsAt,
            ends_at=a.endsAt if a.status == "resolved" else None,  # firing: Go's zero time
            generator_url=a.generatorURL,
        )
        for a in payload.alerts
    ]


Explain = Callable[[Mapping[str, str]], dict[str, str]]


def with_context(alert: Alert, explain: Explain) -> Alert:
    """A firing alert Prometheus evaluated gains the monitor's own evidence, as annotations,
    when its labels name a target, GPU or model the monitor knows (and it has none already)."""
    if alert.status != "firing" or CONTEXT in alert.annotations or PROBABLE_CAUSE in alert.annotations:
        return alert
    try:
        extra = explain(alert.labels)
    except Exception:  # the evidence is a bonus: the alert is stored and sent without it
        log.exception("alertmanager webhook: context for %s failed", alert.name)
        return alert
    if not extra:
        return alert
    return Alert(alert.labels, {**alert.annotations, **extra}, alert.starts_at, alert.ends_at,
                 alert.generator_url, alert.fingerprint)


def add_alertmanager_route(app: FastAPI, delivery: Delivery, token: SecretStr | None,
                           explain: Explain | None = None) -> None:
    @app.post("/api/v1/alertmanager", dependencies=[Depends(bearer_guard(token))])
    async def alertmanager_webhook(payload: AmPayload) -> JSONResponse:
        alerts = to_alerts(payload)
        if explain is not None:
            alerts = [with_context(alert, explain) for alert in alerts]
        try:
            new = delivery.store(alerts, "alertmanager")
        except SQLAlchemyError as exc:
            log.error("alertmanager webhook: cannot persist %d alert(s): %s", len(alerts), type(exc).__name__)
            return JSONResponse({"error": "cannot persist the notification now; retry"}, status_code=503)
        return JSONResponse({"status": "stored", "alerts": len(alerts), "new_transitions": new})
