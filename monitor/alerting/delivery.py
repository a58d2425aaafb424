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
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx
from prometheus_client.core import Metric
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from monitor.alerting.model import Alert
from monitor.alerting.outbox import Due, Outbox
from monitor.alerting.receivers import build_receiver
from monitor.alerting.receivers.base import Outcome, Receiver
from monitor.catalog import family
from monitor.config import AlertingSettings
from monitor.health import HealthBook
from monitor.store.worker import StoreWorker

log = logging.getLogger("monitor.alerting.delivery")

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 60.0
MAX_SENDS_PER_ROUND = 50  # per receiver and run: bounded work per tick
RECENT = 50  # transitions kept in `latest`
STUCK_AFTER = 2.0  # a store call running longer (a lock held elsewhere): a post is answered 503 at once


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
        self.worker = worker or StoreWorker(engine, HealthBook(wall=wall))
        self.wall = wall
        self.counts: Counter[tuple[str, str]] = Counter()
        self.failing = dict.fromkeys(configs, False)
        self.pending = dict.fromkeys(configs, 0)
        self.oldest_pending: dict[str, float] = {}  # receiver -> when its oldest undelivered one was queued
        # The newest transitions with their delivery states, kept by the store thread for the page
        # and /api/v1/status (a query there would wait on the loop for a locked database).
        self.latest: list[dict[str, Any]] = self.outbox.recent(RECENT)

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        self.store(alerts, source)

    def store(self, alerts: Sequence[Alert], source: str) -> int:
        """As `enqueue`, returning how many transitions were new (the rest were duplicates)."""
        new = self.outbox.store(alerts, source)
        self.latest = self.outbox.recent(RECENT)
        return new

    async def store_async(self, alerts: Sequence[Alert], source: str) -> int:
        """As `store`, on the store thread (the Alertmanager receiver awaits it)."""
        return await self.worker.call(self.store, alerts, source, stuck_after=STUCK_AFTER)

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        return self.outbox.recent(limit)

    async def run_once(self) -> None:
        """The sender job: flush due groups, drain the queues. A database outage is logged and
        retried on the next run; nothing is lost (what was stored stays stored)."""
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

    def _count(self, receiver: str, outcome: str) -> None:
        self.counts[(receiver, outcome)] += 1


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
