"""Delivery: the AlertSink the evaluator and the Alertmanager receiver write to, and the sender job.

`enqueue` only writes the outbox (one transaction) and returns; `run_once` (a job, every
second; each outbox call on the store thread, never on the event loop) flushes the due groups
and drains each receiver's queue in order, concurrently across
receivers: a receiver that is down retries with exponential backoff until its retry deadline,
and the others are not held up. A notification is marked sent only after the receiver
accepted it, so after a crash the unsent ones go out on the next run — once each.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import httpx
from prometheus_client.core import Metric
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from monitor.alerting.grouping import group_id, group_labels, transition_key
from monitor.alerting.model import Alert
from monitor.alerting.outbox import Due, Outbox, TransitionRow
from monitor.alerting.receivers import build_receiver
from monitor.alerting.receivers.base import Notification, Outcome, Receiver
from monitor.alerting.runbooks import link_alert
from monitor.catalog import family
from monitor.config import AlertingSettings, ReceiverSettings
from monitor.health import HealthBook
from monitor.store.worker import STUCK_AFTER, StoreWorker

log = logging.getLogger("monitor.alerting.delivery")

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 60.0
MAX_SENDS_PER_ROUND = 50  # per receiver and run: bounded work per tick
RECENT = 50  # transitions kept in `latest`


def backoff(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones: 1, 2, 4, … 60."""
    return float(min(BACKOFF_MAX, BACKOFF_INITIAL * 2.0 ** max(0, attempts - 1)))


class Delivery:
    def __init__(
        self,
        settings: AlertingSettings,
        engine: Engine,
        client: httpx.AsyncClient,
        wall: Callable[[], float] = time.time,
        receivers: Mapping[str, Receiver] | None = None,
        worker: StoreWorker | None = None,
    ) -> None:
        configs = {r.name: r for r in settings.receivers}
        self.receivers = (
            dict(receivers)
            if receivers is not None
            else {name: build_receiver(config, client) for name, config in configs.items()}
        )
        # how long a send may hold a notification: its timeout and a margin
        self.lease = {name: config.timeout.seconds + 5.0 for name, config in configs.items()}
        self.outbox = Outbox(engine, configs, wall, settings.external_url or "", settings.runbook_base_url)
        self.direct = DirectQueue(configs, settings.external_url or "", settings.runbook_base_url)
        self.worker = worker or StoreWorker(engine, HealthBook(wall=wall))
        self.wall = wall
        self.counts: Counter[tuple[str, str]] = Counter()
        self.failing = dict.fromkeys(configs, False)
        self.pending = dict.fromkeys(configs, 0)
        self.oldest_pending: dict[str, float] = {}  # receiver -> when its oldest undelivered one was queued
        # The newest transitions with their delivery states, kept by the store thread for the page
        # and /api/v1/status (a query there would wait on the loop for a locked database).
        self.latest: list[TransitionRow] = self.outbox.recent(RECENT)

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        """The evaluator's transitions into the outbox. When the store cannot take them, the
        monitor's own alerts among them (StoreFailing first of all) are sent from memory, and the
        error is raised: the evaluator offers every transition again, and once the store takes
        them, those already sent are recorded as sent, not sent again."""
        try:
            self.store(alerts, source)
        except Exception:
            self.direct.offer(alerts, self.wall())
            raise

    def store(self, alerts: Sequence[Alert], source: str) -> int:
        """As `enqueue`, returning how many transitions were new (the rest were duplicates)."""
        delivered = self.direct.delivered(alerts)
        new = self.outbox.store(alerts, source, delivered)
        self.direct.recorded(alerts)
        self.latest = self.outbox.recent(RECENT)
        return new

    async def store_async(self, alerts: Sequence[Alert], source: str) -> int:
        """As `store`, on the store thread (the Alertmanager receiver awaits it)."""
        return await self.worker.call(self.store, alerts, source, stuck_after=STUCK_AFTER)

    def recent(self, limit: int = 50) -> list[TransitionRow]:
        return self.outbox.recent(limit)

    async def run_once(self) -> None:
        """The sender job: flush due groups, drain the queues. A database outage is logged and
        retried on the next run; nothing is lost (what was stored stays stored)."""
        await self._drain_direct()  # first, and without the store: it may be what is failing
        io = self.worker.call
        try:
            await io(self.outbox.flush_groups)
            await asyncio.gather(*(self._drain(name, receiver) for name, receiver in self.receivers.items()))
            self.pending = await io(self.outbox.pending_counts)
            self.oldest_pending = await io(self.outbox.oldest_pending)
            self.latest = await io(self.outbox.recent, RECENT)
        except SQLAlchemyError as exc:
            log.warning("delivery: outbox unavailable (%s), retrying next run", type(exc).__name__)

    async def prune(self, before_ts: float) -> None:
        await self.worker.call(self.outbox.prune, before_ts)

    async def _drain(self, name: str, receiver: Receiver) -> None:
        io = self.worker.call
        for _ in range(MAX_SENDS_PER_ROUND):
            due = await io(self.outbox.next_due, name)
            now = self.wall()
            if due is None or due.next_attempt_at > now:
                return  # nothing queued, or the oldest is backing off: the rest wait behind it
            if due.deadline < now:
                await io(self.outbox.settle, due.id, "expired", "retry deadline passed")
                self._count(name, "dropped_expired")
                log.warning("receiver %s: notification %d dropped after its retry deadline", name, due.id)
                continue
            limit = receiver.rate_limit
            if limit is not None and limit.wait(now) > 0:
                return  # over the platform's rate: stays queued for the next run
            if not await io(self.outbox.claim, due, now + self.lease.get(name, 35.0)):
                return  # another replica is sending it
            if limit is not None:
                limit.record(now)
            try:
                outcome = await receiver.send(due.notification)
            except Exception as exc:  # a bug rendering one message must not stall the queue behind it
                log.exception("receiver %s: cannot build notification %d", name, due.id)
                outcome = Outcome(False, False, f"internal error: {type(exc).__name__}")
            await self._settle(name, due, outcome)
            if not outcome.sent and outcome.retry:
                return

    async def _settle(self, name: str, due: Due, outcome: Outcome) -> None:
        io = self.worker.call
        was_failing = self.failing.get(name, False)
        self.failing[name] = not outcome.sent
        if outcome.sent:
            await io(self.outbox.settle, due.id, "sent", None)
            self._count(name, "sent")
            if was_failing:
                log.info("receiver %s: delivering again", name)
            return
        if outcome.retry:
            retry_at = self.wall() + backoff(due.attempts + 1)
            await io(self.outbox.settle, due.id, "pending", outcome.error, retry_at)
            self._count(name, "retried")
        else:
            await io(self.outbox.settle, due.id, "failed", outcome.error)
            self._count(name, "failed")
        # A long outage logs when it starts (and on permanent failures), not on every retry.
        level = logging.DEBUG if was_failing and outcome.retry else logging.WARNING
        verdict = "will retry" if outcome.retry else "giving up on this notification"
        log.log(level, "receiver %s: send failed (%s), %s", name, outcome.error, verdict)

    async def _drain_direct(self) -> None:
        for note in self.direct.due(self.wall()):
            receiver = self.receivers.get(note.notification.receiver)
            if receiver is None:
                self.direct.drop(note)
                continue
            try:
                outcome = await receiver.send(note.notification)
            except Exception as exc:
                log.exception("receiver %s: cannot build a notification sent from memory", note.notification.receiver)
                outcome = Outcome(False, False, f"internal error: {type(exc).__name__}")
            name = note.notification.receiver
            if outcome.sent:
                self.direct.sent(note, self.wall())
                self._count(name, "sent_direct")
                log.warning("receiver %s: sent %d alert(s) of the monitor's own from memory (the store cannot take "
                            "them): %s", name, len(note.notification.alerts),
                            ", ".join(sorted({a.name for a in note.notification.alerts})))
            elif outcome.retry:
                self.direct.retry(note, self.wall() + backoff(note.attempts + 1))
                self._count(name, "retried_direct")
            else:
                self.direct.drop(note)
                self._count(name, "failed_direct")
                log.warning("receiver %s: a notification sent from memory failed (%s), giving up", name,
                            outcome.error)

    def _count(self, receiver: str, outcome: str) -> None:
        self.counts[(receiver, outcome)] += 1


DIRECT_LAYER = "monitor"  # the alerts about the monitor itself: what must reach someone while the store is down
MAX_DIRECT = 100  # notifications held in memory; past it the oldest are dropped (and said)


@dataclass
class DirectNote:
    notification: Notification
    keys: tuple[str, ...]  # the transitions it carries (transition_key)
    next_attempt_at: float
    attempts: int = 0


class DirectQueue:
    """The in-memory path for the monitor's own alerts while the outbox cannot take them: one
    notification per receiver and group, sent by the sender job ahead of the outbox, recorded in
    the outbox as sent once the store takes the transitions. Offered from the store thread, sent
    from the loop: one lock."""

    def __init__(self, receivers: Mapping[str, ReceiverSettings], external_url: str,
                 runbook_base_url: str | None) -> None:
        self.receivers = receivers
        self.external_url = external_url
        self.runbook_base_url = runbook_base_url
        self.lock = threading.Lock()
        self.queue: list[DirectNote] = []
        self.offered: set[str] = set()  # transition keys queued or sent from memory, not yet recorded
        self.delivered_at: dict[tuple[str, str], float] = {}  # (receiver, transition key) -> when sent

    def offer(self, alerts: Sequence[Alert], now: float) -> None:
        with self.lock:
            fresh = [a for a in alerts if a.labels.get("layer") == DIRECT_LAYER and a.status == "firing"
                     and transition_key(a) not in self.offered]
            if not fresh or not self.receivers:
                return
            self.offered.update(transition_key(a) for a in fresh)
            for settings in self.receivers.values():
                groups: dict[str, tuple[dict[str, str], list[Alert]]] = {}
                for alert in fresh:
                    labels = group_labels(alert.labels, settings.group_by)
                    groups.setdefault(group_id(settings.name, labels), (labels, []))[1].append(alert)
                for key, (labels, members) in groups.items():
                    linked = [link_alert(a, self.runbook_base_url) for a in members]
                    notification = Notification(settings.name, key, labels, linked, self.external_url)
                    self.queue.append(DirectNote(notification, tuple(transition_key(a) for a in members), now))
            if len(self.queue) > MAX_DIRECT:
                dropped, self.queue = self.queue[:-MAX_DIRECT], self.queue[-MAX_DIRECT:]
                log.warning("delivery: %d notification(s) of the monitor's own dropped from memory (more than %d)",
                            len(dropped), MAX_DIRECT)

    def due(self, now: float) -> list[DirectNote]:
        with self.lock:
            return [note for note in self.queue if note.next_attempt_at <= now]

    def sent(self, note: DirectNote, at: float) -> None:
        with self.lock:
            if note in self.queue:
                self.queue.remove(note)
            for key in note.keys:
                self.delivered_at[(note.notification.receiver, key)] = at

    def retry(self, note: DirectNote, at: float) -> None:
        with self.lock:
            note.attempts += 1
            note.next_attempt_at = at

    def drop(self, note: DirectNote) -> None:
        with self.lock:
            if note in self.queue:
                self.queue.remove(note)

    def delivered(self, alerts: Sequence[Alert]) -> dict[tuple[str, str], float]:
        """Which of these transitions each receiver already got from memory, and when."""
        with self.lock:
            if not self.delivered_at:
                return {}
            keys = {transition_key(a) for a in alerts}
            return {pair: at for pair, at in self.delivered_at.items() if pair[1] in keys}

    def recorded(self, alerts: Sequence[Alert]) -> None:
        """The store took these transitions: the outbox delivers (or recorded) them from now on, so
        what is still queued here for them is withdrawn."""
        with self.lock:
            if not self.offered:
                return
            keys = {transition_key(a) for a in alerts} & self.offered
            if not keys:
                return
            self.offered -= keys
            self.queue = [note for note in self.queue if not keys.intersection(note.keys)]
            self.delivered_at = {pair: at for pair, at in self.delivered_at.items() if pair[1] not in keys}


def render_delivery(delivery: Delivery) -> Iterator[Metric]:
    total = family("inference_monitor_notifications_total")
    for (receiver, outcome), count in sorted(delivery.counts.items()):
        total.add_sample(total.name + "_total", {"receiver": receiver, "outcome": outcome}, float(count))
    pending = family("inference_monitor_outbox_pending")
    for receiver, count in sorted(delivery.pending.items()):
        pending.add_sample(pending.name, {"receiver": receiver}, float(count))
    failing = family("inference_monitor_notifications_failing")
    for receiver, is_failing in sorted(delivery.failing.items()):
        failing.add_sample(failing.name, {"receiver": receiver}, 1.0 if is_failing else 0.0)
    # Every receiver has a sample (0 when nothing waits), so the NotificationsFailing rule resolves.
    oldest = family("inference_monitor_outbox_oldest_pending_seconds")
    now = delivery.wall()
    for receiver in sorted(delivery.pending):
        queued = delivery.oldest_pending.get(receiver)
        oldest.add_sample(oldest.name, {"receiver": receiver}, max(0.0, now - queued) if queued is not None else 0.0)
    yield total
    yield pending
    yield failing
    yield oldest
