"""The weekly digest: the history's week over week per model (`monitor.history.digest`) with the
trend alerts that fired in the week, read from the alert transitions (embedded or Alertmanager's)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from monitor.alerting.outbox import Outbox
from monitor.alerting.receivers.base import DigestMessage
from monitor.alerting.store import AlertTransition
from monitor.history.digest import WEEK, Digest, FiredTrend, ModelWeek, as_json, read_weeks
from monitor.history.store import HistoryTables


def fired_trends(engine: Engine, since: float, until: float) -> list[FiredTrend]:
    """The trend alerts (label `kind="trend"`) that began firing in (since, until], oldest first;
    one each, whichever source (the embedded evaluator, Alertmanager) recorded it."""
    query = (select(AlertTransition.fingerprint, AlertTransition.labels, AlertTransition.annotations,
                    AlertTransition.starts_at)
             .where(AlertTransition.status == "firing", AlertTransition.starts_at > since,
                    AlertTransition.starts_at <= until, AlertTransition.labels.contains('"kind": "trend"'))
             .order_by(AlertTransition.starts_at))
    seen: set[tuple[str, float]] = set()
    out = []
    with Session(engine) as session:
        for fingerprint, labels_text, annotations_text, starts_at in session.execute(query):
            labels, annotations = json.loads(labels_text), json.loads(annotations_text)
            if labels.get("kind") != "trend" or (fingerprint, starts_at) in seen:
                continue
            seen.add((fingerprint, starts_at))
            out.append(FiredTrend(labels.get("alertname", ""), labels.get("model", ""), labels.get("target", ""),
                                  starts_at, annotations.get("summary", ""), annotations.get("probable_cause", "")))
    return out


def weekly_digest(engine: Engine, now: float) -> Digest:
    """Each model's week against the week before, and the trend alerts of the week beside its model
    (an alert without a model, or of a model without history, gets a row of its own)."""
    models = {week.model: week for week in read_weeks(HistoryTables(engine), now)}
    for alert in fired_trends(engine, now - WEEK, now):
        week = models.get(alert.model) or ModelWeek(alert.model, {})
        models[alert.model] = replace(week, fired=[*week.fired, alert])
    return Digest(now, [models[name] for name in sorted(models)])


def digest_key(now: float, timezone: str) -> str:
    """The digest's idempotency key: the ISO date it is posted on, in the schedule's time zone
    (a run repeated that day, by a restart or a second replica, finds it queued)."""
    return "digest:" + datetime.fromtimestamp(now, ZoneInfo(timezone)).date().isoformat()


def digest_message(digest: Digest, text: str, timezone: str) -> DigestMessage:
    day = digest_key(digest.now, timezone).removeprefix("digest:")
    return DigestMessage(digest_key(digest.now, timezone), f"Weekly digest {day}: what is slowly getting worse",
                         text, as_json(digest))


def queue_digest(outbox: Outbox, receivers: Sequence[str], now: float, timezone: str,
                 write_text: Callable[[Digest], str]) -> list[str]:
    """Build the week's digest and queue it once for each receiver (the outbox sends it, retrying a
    receiver that is down); returns the receivers it was queued for now (not those that had it)."""
    found = weekly_digest(outbox.engine, now)
    message = digest_message(found, write_text(found), timezone)
    return [name for name in receivers if outbox.queue_message(name, message)]
