"""`POST /api/v1/alertmanager`: Alertmanager's webhook, fanned out through the outbox.

Alertmanager delivers at least once and retries on 5xx, so: answer 2xx only once the
transitions are persisted, 503 when the database cannot take them, and store each transition
once (a payload posted twice becomes one message). The bearer token is checked before a byte
of the body is read; the body is capped (`api.max_body_bytes`, 413), parsed and validated off
the event loop, and bounded: at most `api.max_alerts_per_payload` alerts, label and annotation
values cut to `api.max_label_chars` / `max_annotation_chars` — what was cut is said in the
response and a log line. The store runs on the store thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import SQLAlchemyError

from monitor.alerting.delivery import Delivery
from monitor.alerting.explain import CONTEXT, PROBABLE_CAUSE
from monitor.alerting.model import Alert
from monitor.auth import access_guard
from monitor.body import parse_json, read_limited
from monitor.config import ApiSettings, Settings
from monitor.store.worker import StoreUnavailable

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


@dataclass
class Cuts:
    """What a payload lost to the limits (said in the response and the log)."""

    alerts_dropped: int = 0
    labels_cut: int = 0
    annotations_cut: int = 0
    keys: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.alerts_dropped or self.labels_cut or self.annotations_cut)

    def as_dict(self) -> dict[str, object]:
        return {"alerts_dropped": self.alerts_dropped, "label_values_cut": self.labels_cut,
                "annotation_values_cut": self.annotations_cut, "keys": sorted(self.keys)[:20]}


def parse_payload(body: bytes, limits: ApiSettings) -> tuple[AmPayload, Cuts]:
    """The body as a bounded payload (in a worker thread: parsing 4 MB is not for the loop);
    HTTPException 400/422 when it is not one."""
    data = parse_json(body)
    cuts = Cuts()
    alerts = data.get("alerts") if isinstance(data, dict) else None
    try:
        if not isinstance(alerts, list):
            return AmPayload.model_validate(data), cuts  # raises: not a payload
        cuts.alerts_dropped = max(0, len(alerts) - limits.max_alerts_per_payload)
        # One alert at a time: one validation call for 5,000 would hold the GIL (and the loop) throughout.
        kept = [_validated(alert, index) for index, alert in enumerate(alerts[: limits.max_alerts_per_payload])]
        payload = AmPayload.model_validate({**data, "alerts": []})
        payload.alerts = kept
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}" for e in exc.errors()[:5])
        raise HTTPException(422, problems[:1000]) from None
    for alert in payload.alerts:
        cuts.labels_cut += _cut(alert.labels, limits.max_label_chars, cuts.keys)
        cuts.annotations_cut += _cut(alert.annotations, limits.max_annotation_chars, cuts.keys)
    return payload, cuts


def _validated(alert: object, index: int) -> AmAlert:
    try:
        return AmAlert.model_validate(alert)
    except ValidationError as exc:
        problems = "; ".join(f"alerts.{index}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise HTTPException(422, problems[:1000]) from None


def _cut(values: dict[str, str], limit: int, keys: set[str]) -> int:
    cut = 0
    for key, value in values.items():
        if len(value) > limit:
            values[key] = value[: limit - 1] + "…"
            keys.add(key[:64])
            cut += 1
    return cut


def add_alertmanager_route(app: FastAPI, delivery: Delivery, settings: Settings,
                           explain: Explain | None = None) -> None:
    limits = settings.api

    def prepare(body: bytes) -> tuple[list[Alert], Cuts]:
        """Parse, bound, fingerprint and explain (a worker thread: thousands of alerts take a while)."""
        payload, cuts = parse_payload(body, limits)
        alerts = to_alerts(payload)
        if explain is not None:
            alerts = [with_context(alert, explain) for alert in alerts]
        return alerts, cuts

    @app.post("/api/v1/alertmanager", dependencies=[Depends(access_guard(settings))])
    async def alertmanager_webhook(request: Request) -> JSONResponse:
        body = await read_limited(request, limits.max_body_bytes)  # after the token: the guard ran first
        alerts, cuts = await asyncio.to_thread(prepare, body)
        if cuts:
            log.warning("alertmanager webhook: payload cut to the limits: %d alert(s) dropped past %d, "
                        "%d label and %d annotation value(s) shortened (%s)", cuts.alerts_dropped,
                        limits.max_alerts_per_payload, cuts.labels_cut, cuts.annotations_cut,
                        ", ".join(sorted(cuts.keys)[:5]))
        try:
            new = await delivery.store_async(alerts, "alertmanager")
        except (SQLAlchemyError, StoreUnavailable) as exc:
            log.error("alertmanager webhook: cannot persist %d alert(s): %s", len(alerts), type(exc).__name__)
            return JSONResponse({"error": "cannot persist the notification now; retry"}, status_code=503)
        answer: dict[str, object] = {"status": "stored", "alerts": len(alerts), "new_transitions": new}
        if cuts:
            answer["cut"] = cuts.as_dict()
        return JSONResponse(answer)
