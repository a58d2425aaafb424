"""The outbox: every transition is written here before anything is sent (tables in store/outbox.py).

    store(alerts)     one transaction: new transitions (duplicates skipped), each receiver's
                      group membership; a new group is due after group_wait
    flush_groups()    due groups decide (grouping.needs_update) and queue one notification each
    next_due(r)       the receiver's oldest queued notification, in order, with its alerts
    settle(...)       sent | retry later (backoff) | failed | expired

Delivery (delivery.py) drives these; nothing here sends or sleeps, and the clock is injected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from monitor.alerting.grouping import (
    LastNotification,
    group_id,
    group_labels,
    needs_update,
    supersedes,
    transition_key,
)
from monitor.alerting.model import Alert
from monitor.alerting.receivers.base import DigestMessage, Notification
from monitor.alerting.runbooks import link_alert
from monitor.alerting.store import AlertTransition, OutboxGroup, OutboxMember, OutboxNotification
from monitor.config import ReceiverSettings
from monitor.store.conflicts import retry_conflicts


class TransitionRow(TypedDict):
    """One stored alert transition with its delivery state per receiver (`Outbox.recent`)."""

    id: int
    ts: float
    source: str  # embedded | alertmanager
    fingerprint: str
    status: str  # firing | resolved
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: float
    ends_at: float | None
    deliveries: dict[str, str]  # receiver -> waiting | pending | sent | failed | expired | not_sent


@dataclass(frozen=True)
class Due:
    id: int
    attempts: int
    next_attempt_at: float
    deadline: float
    notification: Notification


class Outbox:
    def __init__(
        self,
        engine: Engine,
        receivers: Mapping[str, ReceiverSettings],
        wall: Callable[[], float],
        external_url: str = "",
        runbook_base_url: str | None = None,
    ) -> None:
        self.engine = engine
        self.receivers = receivers
        self.wall = wall
        self.external_url = external_url
        self.runbook_base_url = runbook_base_url  # repo-path runbooks become links (alerting/runbooks.py)

    # -- writing transitions ----------------------------------------------------------------

    def store(self, alerts: Sequence[Alert], source: str,
              delivered: Mapping[tuple[str, str], float] | None = None) -> int:
        """Persist the transitions not seen before; returns how many were new. Raises if the
        database cannot take them (the Alertmanager receiver then answers 5xx). A replica that
        stored the same transition at the same moment wins; this one then finds it stored.
        `delivered`: (receiver, transition key) -> when it was sent from memory while the store
        was down (delivery.DirectQueue): recorded as sent, and its group as notified of it."""
        return retry_conflicts(lambda: self._store_once(alerts, source, delivered or {}))

    def _store_once(self, alerts: Sequence[Alert], source: str, delivered: Mapping[tuple[str, str], float]) -> int:
        now = self.wall()
        with Session(self.engine) as session, session.begin():
            keys = [transition_key(alert) for alert in alerts]
            seen = set(_in_chunks(session, AlertTransition.dedup_key, AlertTransition.dedup_key, keys))
            fresh: list[tuple[Alert, AlertTransition]] = []
            for alert, key in zip(alerts, keys, strict=True):
                if key in seen:
                    continue
                seen.add(key)
                fresh.append((alert, _transition_row(alert, key, source, now)))
            if not fresh:
                return 0
            session.add_all([row for _, row in fresh])
            session.flush()  # one round trip: the new rows get their ids
            book = _GroupBook.load(session, self.receivers.values(), [alert for alert, _ in fresh])
            book.transitions.update({row.id: row for _, row in fresh})
            for alert, row in fresh:
                for settings in self.receivers.values():
                    group = self._join(session, book, settings, alert, row.id, now, source)
                    sent_at = delivered.get((settings.name, row.dedup_key))
                    if group is not None and sent_at is not None:
                        _record_direct(session, group, alert, row, sent_at, settings)
        return len(fresh)

    def _join(
        self, session: Session, book: _GroupBook, settings: ReceiverSettings, alert: Alert, tid: int, now: float,
        source: str,
    ) -> OutboxGroup | None:
        labels = group_labels(alert.labels, settings.group_by)
        key = group_id(settings.name, labels)
        member = book.members.get((settings.name, key, alert.fingerprint))
        if member is None:
            member = OutboxMember(receiver=settings.name, group_key=key, fingerprint=alert.fingerprint,
                                  transition_id=tid)
            session.add(member)
            book.members[(settings.name, key, alert.fingerprint)] = member
        else:
            current = book.transitions.get(member.transition_id) or session.get(AlertTransition, member.transition_id)
            if current is not None and not supersedes(alert, _alert(current)):
                return None  # a late, older state of an alert the group already holds
            member.transition_id = tid
        group = book.groups.get((settings.name, key))
        # Alertmanager already waited its group_wait / group_interval before posting: no second wait.
        from_alertmanager = source == "alertmanager"
        if group is None:
            wait = 0.0 if from_alertmanager else settings.group_wait.seconds
            group = OutboxGroup(receiver=settings.name, group_key=key, group_labels=_dump(labels),
                                next_flush_at=now + wait)
            session.add(group)
            book.groups[(settings.name, key)] = group
        elif from_alertmanager:
            group.next_flush_at = min(group.next_flush_at, now)
        return group

    # -- grouping ---------------------------------------------------------------------------

    def flush_groups(self) -> int:
        """Flush every due group; returns how many notifications were queued."""
        now, queued = self.wall(), 0
        with Session(self.engine) as session, session.begin():
            due = session.scalars(select(OutboxGroup).where(OutboxGroup.next_flush_at <= now).order_by(OutboxGroup.id))
            for group in list(due):
                if self._claim_group(session, group):
                    queued += self._flush(session, group, now)
            self._adopt_orphans(session, now)
        return queued

    def _adopt_orphans(self, session: Session, now: float) -> None:
        """Members whose group a concurrent flush deleted (replicas sharing PostgreSQL) get it back."""
        orphans = session.execute(
            select(OutboxMember.receiver, OutboxMember.group_key, func.min(OutboxMember.transition_id))
            .where(
                ~select(OutboxGroup.id)
                .where(OutboxGroup.receiver == OutboxMember.receiver, OutboxGroup.group_key == OutboxMember.group_key)
                .exists()
            )
            .group_by(OutboxMember.receiver, OutboxMember.group_key)
        ).all()
        for receiver, key, tid in orphans:
            settings, row = self.receivers.get(receiver), session.get(AlertTransition, tid)
            labels = group_labels(json.loads(row.labels), settings.group_by) if settings and row else {}
            session.add(OutboxGroup(receiver=receiver, group_key=key, group_labels=_dump(labels), next_flush_at=now))

    @staticmethod
    def _claim_group(session: Session, group: OutboxGroup) -> bool:
        """Two replicas sharing PostgreSQL: the first to move the group's flush time flushes it."""
        claimed = session.execute(
            update(OutboxGroup)
            .where(OutboxGroup.id == group.id, OutboxGroup.next_flush_at == group.next_flush_at)
            .values(next_flush_at=group.next_flush_at + 1e-3)
            .execution_options(synchronize_session=False)
        )
        return int(getattr(claimed, "rowcount", 0) or 0) == 1

    def _flush(self, session: Session, group: OutboxGroup, now: float) -> int:
        settings = self.receivers.get(group.receiver)
        members = list(
            session.scalars(
                select(OutboxMember).where(
                    OutboxMember.receiver == group.receiver, OutboxMember.group_key == group.group_key
                )
            )
        )
        if settings is None:  # the receiver was removed from the configuration
            _delete_group(session, group, members)
            return 0
        loaded = {t.id: t for t in _in_chunks(session, AlertTransition, AlertTransition.id,
                                               [m.transition_id for m in members])}
        rows = {m.id: loaded.get(m.transition_id) for m in members}
        firing = {r.fingerprint for r in rows.values() if r is not None and r.status == "firing"}
        resolved = {r.fingerprint for r in rows.values() if r is not None and r.status == "resolved"}
        queued = 0
        if needs_update(_last(group), firing, resolved, settings.send_resolved, settings.repeat_interval.seconds, now):
            carried = [r for r in rows.values() if r is not None and (r.status == "firing" or settings.send_resolved)]
            if carried:
                self._queue(session, settings, group, carried, now)
                queued = 1
            group.notified_firing, group.notified_resolved = _dump(sorted(firing)), _dump(sorted(resolved))
            group.last_sent_at = now
        for member in members:  # resolved alerts leave the group once flushed, as in Alertmanager
            row = rows[member.id]
            if row is None or row.status == "resolved":
                session.delete(member)
        if len(firing) == 0:
            _delete_group(session, group, [])
        else:
            group.next_flush_at = now + settings.group_interval.seconds
        return queued

    def _queue(
        self, session: Session, settings: ReceiverSettings, group: OutboxGroup, rows: list[AlertTransition], now: float
    ) -> None:
        rows = sorted(rows, key=_message_order)
        keep = rows[: settings.max_alerts] if settings.max_alerts else rows
        session.add(
            OutboxNotification(
                receiver=settings.name,
                group_key=group.group_key,
                group_labels=group.group_labels,
                transition_ids=_dump([r.id for r in keep]),
                truncated_alerts=len(rows) - len(keep),
                state="pending",
                attempts=0,
                created_at=now,
                next_attempt_at=now,
                deadline=now + settings.retry_deadline.seconds,
            )
        )

    # -- messages that are no alerts (the weekly digest) -----------------------------------

    def queue_message(self, receiver: str, message: DigestMessage) -> bool:
        """Queue `message` for `receiver` unless one with its key was ever queued for it (sent,
        pending or given up): False then. Sent in order with the receiver's alerts, retried as they are."""
        settings = self.receivers.get(receiver)
        if settings is None:
            raise KeyError(f"no receiver named {receiver!r}")
        now = self.wall()
        with Session(self.engine) as session, session.begin():
            seen = session.scalar(select(OutboxNotification.id).where(
                OutboxNotification.receiver == receiver, OutboxNotification.group_key == message.key).limit(1))
            if seen is not None:
                return False
            session.add(OutboxNotification(
                receiver=receiver, group_key=message.key, group_labels=_dump({}), transition_ids=_dump([]),
                truncated_alerts=0, state="pending", attempts=0, created_at=now, next_attempt_at=now,
                deadline=now + settings.retry_deadline.seconds,
                payload=_dump({"title": message.title, "text": message.text, "document": message.document})))
        return True

    # -- sending ----------------------------------------------------------------------------

    def next_due(self, receiver: str) -> Due | None:
        """The receiver's oldest pending notification (order is kept: a newer one waits behind it)."""
        with Session(self.engine) as session:
            row = session.scalar(
                select(OutboxNotification)
                .where(OutboxNotification.receiver == receiver, OutboxNotification.state == "pending")
                .order_by(OutboxNotification.id)
                .limit(1)
            )
            if row is None:
                return None
            if row.payload is not None:
                message = DigestMessage(row.group_key, **json.loads(row.payload))
                notification = Notification(receiver, row.group_key, {}, [], self.external_url, 0, message)
                return Due(row.id, row.attempts, row.next_attempt_at, row.deadline, notification)
            ids = json.loads(row.transition_ids)
            by_id = {t.id: t for t in session.scalars(select(AlertTransition).where(AlertTransition.id.in_(ids)))}
            alerts = [link_alert(_alert(by_id[i]), self.runbook_base_url) for i in ids if i in by_id]
            notification = Notification(
                receiver, row.group_key, json.loads(row.group_labels), alerts, self.external_url, row.truncated_alerts
            )
            return Due(row.id, row.attempts, row.next_attempt_at, row.deadline, notification)

    def claim(self, due: Due, until: float) -> bool:
        """Take a notification for one send: another replica sharing the database skips it, and
        a crash in the middle of the send releases it when `until` passes (then it is retried)."""
        with Session(self.engine) as session, session.begin():
            claimed = session.execute(
                update(OutboxNotification)
                .where(
                    OutboxNotification.id == due.id,
                    OutboxNotification.state == "pending",
                    OutboxNotification.next_attempt_at == due.next_attempt_at,
                )
                .values(next_attempt_at=until)
            )
            return int(getattr(claimed, "rowcount", 0) or 0) == 1

    def settle(self, notification_id: int, state: str, error: str | None, retry_at: float | None = None) -> int:
        """Record an attempt: state sent | failed | expired, or pending again with `retry_at`."""
        with Session(self.engine) as session, session.begin():
            row = session.get(OutboxNotification, notification_id)
            if row is None:
                return 0
            row.attempts += 0 if state == "expired" else 1
            row.state, row.last_error = state, error
            if retry_at is not None:
                row.next_attempt_at = retry_at
            else:
                row.finished_at = self.wall()
            return row.attempts

    def oldest_pending(self) -> dict[str, float]:
        """When each receiver's oldest undelivered notification was queued (receivers with one)."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(OutboxNotification.receiver, func.min(OutboxNotification.created_at))
                .where(OutboxNotification.state == "pending")
                .group_by(OutboxNotification.receiver)
            )
            return {name: float(created) for name, created in rows if name in self.receivers}

    def pending_counts(self) -> dict[str, int]:
        with Session(self.engine) as session:
            rows = session.execute(
                select(OutboxNotification.receiver, func.count())
                .where(OutboxNotification.state == "pending")
                .group_by(OutboxNotification.receiver)
            )
            counts = dict.fromkeys(self.receivers, 0)
            counts.update({name: int(n) for name, n in rows if name in counts})
            return counts

    # -- reading and pruning ----------------------------------------------------------------

    def recent(self, limit: int = 50) -> list[TransitionRow]:
        """The latest transitions, newest first, each with its delivery state per receiver:
        waiting (in its group), pending (queued or retrying), sent, failed, expired, or
        not_sent (superseded inside its group, or resolved for a receiver without send_resolved)."""
        with Session(self.engine) as session:
            rows = list(session.scalars(select(AlertTransition).order_by(AlertTransition.id.desc()).limit(limit)))
            if not rows:
                return []
            first = min(r.id for r in rows)
            states: dict[tuple[int, str], str] = {}
            notifications = session.scalars(
                select(OutboxNotification).where(OutboxNotification.created_at >= min(r.created_at for r in rows))
            )
            for n in notifications:
                for tid in json.loads(n.transition_ids):
                    if tid >= first:
                        states[(tid, n.receiver)] = n.state
            waiting = session.execute(select(OutboxMember.transition_id, OutboxMember.receiver))
            for tid, receiver in waiting:
                states.setdefault((tid, receiver), "waiting")
            return [
                _recent_row(r, {name: states.get((r.id, name), "not_sent") for name in self.receivers}) for r in rows
            ]

    def prune(self, before_ts: float) -> int:
        """Drop finished notifications and transitions older than `before_ts` no group still holds."""
        with Session(self.engine) as session, session.begin():
            done = session.execute(
                delete(OutboxNotification).where(
                    OutboxNotification.state != "pending", OutboxNotification.created_at < before_ts
                )
            )
            held = set(session.scalars(select(OutboxMember.transition_id)))
            for notification in session.scalars(select(OutboxNotification.transition_ids)):
                held.update(json.loads(notification))
            old = session.scalars(select(AlertTransition.id).where(AlertTransition.created_at < before_ts))
            gone = [tid for tid in old if tid not in held]
            if gone:
                session.execute(delete(AlertTransition).where(AlertTransition.id.in_(gone)))
            return int(getattr(done, "rowcount", 0) or 0) + len(gone)


CHUNK = 500  # values in one IN (...): well under SQLite's and PostgreSQL's limits


def _in_chunks(session: Session, what: Any, column: Any, values: Sequence[Any]) -> list[Any]:
    """`SELECT what WHERE column IN values`, in chunks: one query per 500 values, not one per value."""
    found: list[Any] = []
    unique = list(dict.fromkeys(values))
    for start in range(0, len(unique), CHUNK):
        found.extend(session.scalars(select(what).where(column.in_(unique[start:start + CHUNK]))))
    return found


@dataclass
class _GroupBook:
    """The members and groups a batch of alerts may join, read in a few queries up front."""

    members: dict[tuple[str, str, str], OutboxMember]
    groups: dict[tuple[str, str], OutboxGroup]
    transitions: dict[int, AlertTransition]  # the members' current ones (held: the session's map is weak)

    @classmethod
    def load(cls, session: Session, receivers: Iterable[ReceiverSettings], alerts: Sequence[Alert]) -> _GroupBook:
        names = [settings.name for settings in receivers]
        group_keys = {group_id(settings.name, group_labels(alert.labels, settings.group_by))
                      for settings in receivers for alert in alerts}
        members: dict[tuple[str, str, str], OutboxMember] = {}
        for member in _in_chunks(session, OutboxMember, OutboxMember.fingerprint, [a.fingerprint for a in alerts]):
            if member.receiver in names:
                members[(member.receiver, member.group_key, member.fingerprint)] = member
        transitions = {t.id: t for t in _in_chunks(session, AlertTransition, AlertTransition.id,
                                                    [m.transition_id for m in members.values()])}
        groups = {(g.receiver, g.group_key): g for g in _in_chunks(session, OutboxGroup, OutboxGroup.group_key,
                                                                   sorted(group_keys))}
        return cls(members, groups, transitions)


def _transition_row(alert: Alert, key: str, source: str, now: float) -> AlertTransition:
    return AlertTransition(
        dedup_key=key,
        created_at=now,
        source=source,
        fingerprint=alert.fingerprint,
        status=alert.status,
        labels=_dump(dict(alert.labels)),
        annotations=_dump(dict(alert.annotations)),
        starts_at=alert.starts_at.timestamp(),
        ends_at=alert.ends_at.timestamp() if alert.ends_at else None,
        generator_url=alert.generator_url,
    )


def _alert(row: AlertTransition) -> Alert:
    ends = datetime.fromtimestamp(row.ends_at, UTC) if row.ends_at is not None else None
    return Alert(
        json.loads(row.labels),
        json.loads(row.annotations),
        datetime.fromtimestamp(row.starts_at, UTC),
        ends,
        row.generator_url,
        row.fingerprint,
    )


def _recent_row(row: AlertTransition, deliveries: dict[str, str]) -> TransitionRow:
    return {
        "id": row.id,
        "ts": row.created_at,
        "source": row.source,
        "fingerprint": row.fingerprint,
        "status": row.status,
        "labels": json.loads(row.labels),
        "annotations": json.loads(row.annotations),
        "starts_at": row.starts_at,
        "ends_at": row.ends_at,
        "deliveries": deliveries,
    }


def _message_order(row: AlertTransition) -> tuple[bool, str, str, list[tuple[str, str]]]:
    """Firing first (a truncated message keeps what matters), then Alertmanager's order:
    job, instance, then the whole label set."""
    labels = json.loads(row.labels)
    return row.status != "firing", labels.get("job", ""), labels.get("instance", ""), sorted(labels.items())


def _last(group: OutboxGroup) -> LastNotification | None:
    if group.last_sent_at is None:
        return None
    firing, resolved = json.loads(group.notified_firing), json.loads(group.notified_resolved)
    return LastNotification(frozenset(firing), frozenset(resolved), group.last_sent_at)


def _record_direct(session: Session, group: OutboxGroup, alert: Alert, row: AlertTransition, sent_at: float,
                   settings: ReceiverSettings) -> None:
    """A firing transition the receiver got from memory: a sent notification in the history, and
    a group that counts it as notified (its next flush sends nothing new; its resolution is sent)."""
    session.add(OutboxNotification(
        receiver=settings.name, group_key=group.group_key, group_labels=group.group_labels,
        transition_ids=_dump([row.id]), truncated_alerts=0, state="sent", attempts=1, created_at=row.created_at,
        next_attempt_at=sent_at, deadline=sent_at + settings.retry_deadline.seconds, finished_at=sent_at,
    ))
    notified = set(json.loads(group.notified_firing or "[]")) if group.last_sent_at is not None else set()
    group.notified_firing = _dump(sorted(notified | {alert.fingerprint}))
    if group.last_sent_at is None:
        group.notified_resolved = _dump([])
    group.last_sent_at = max(group.last_sent_at or 0.0, sent_at)
    group.next_flush_at = max(group.next_flush_at, sent_at + settings.group_interval.seconds)


def _delete_group(session: Session, group: OutboxGroup, members: list[OutboxMember]) -> None:
    for member in members:
        session.delete(member)
    session.delete(group)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
