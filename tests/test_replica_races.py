"""Two replicas racing on one real PostgreSQL database: the same row inserted by both at the same
moment is one row, and neither replica sees an error (the loser's transaction runs again)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from monitor.alerting.outbox import Outbox
from monitor.alerting.store import AlertTransition, OutboxNotification
from monitor.cost.store import CostLedger, CostTotal, Running
from monitor.store.session import Store
from tests.alerting.helpers import Clock, alert, receiver
from tests.alerting.imserver import ImServer

T = TypeVar("T")
ROUNDS = 8


def together(calls: list[Callable[[], T]]) -> list[T]:
    """Run the calls in threads released at the same instant; their results, or the first error."""
    barrier = threading.Barrier(len(calls))
    results: list[T | BaseException] = [RuntimeError("not run")] * len(calls)

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            results[i] = calls[i]()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def test_same_alertmanager_payload_on_both_replicas_at_once(pg_url: str) -> None:
    stores = [Store(pg_url), Store(pg_url)]
    try:
        with ImServer() as im:
            rx = {"webhook-rx": receiver(im, "webhook", group_wait="1s")}
            outboxes = [Outbox(s.engine, rx, Clock()) for s in stores]
            for n in range(ROUNDS):
                same = [alert(gpu=str(n))]
                stored = together([lambda o=o, same=same: o.store(same, "alertmanager") for o in outboxes])
                assert sorted(stored) == [0, 1]
            for outbox in outboxes:
                outbox.flush_groups()
        with Session(stores[0].engine) as session:
            assert session.scalar(select(func.count(AlertTransition.id))) == ROUNDS
            [message] = session.scalars(select(OutboxNotification))  # one group (alertname), one message
            assert len(json.loads(message.transition_ids)) == ROUNDS  # each GPU's alert in it once
    finally:
        for s in stores:
            s.close()


def spent(scope: str, running: Running, now: float) -> list[tuple[str, float]]:
    return [("2026-01-01", (running.usd_per_hour or 0.0) * max(0.0, now - running.updated_ts) / 3600)]


@pytest.mark.parametrize("start", [1_767_240_000.0 + 10 * n for n in range(4)])
def test_first_spend_tick_of_both_replicas_at_once(pg_url: str, start: float) -> None:
    stores = [Store(pg_url), Store(pg_url)]
    try:
        ledgers = [CostLedger(s.engine) for s in stores]
        rates = {"fleet": 28.0}
        ticks = [lambda ledger=ledger: ledger.accrue(start, rates, spent, frozenset({"fleet"}), "2026-01-01")
                 for ledger in ledgers]
        together(ticks)  # both create the fleet total on a fresh database
        hour_later = [lambda ledger=ledger: ledger.accrue(start + 3600, rates, spent, frozenset({"fleet"}),
                                                          "2026-01-01") for ledger in ledgers]
        totals = together(hour_later)
        assert [t[0]["fleet"] for t in totals] == [28.0, 28.0]  # the hour once, whoever ran second
        with Session(stores[0].engine) as session:
            assert session.get_one(CostTotal, "fleet").usd == pytest.approx(28.0)
    finally:
        for s in stores:
            s.close()


def test_a_conflict_that_persists_is_raised_after_three_tries() -> None:
    from sqlalchemy.exc import IntegrityError

    from monitor.store.conflicts import retry_conflicts

    tries = []

    def always_conflicts() -> None:
        tries.append(1)
        raise IntegrityError("INSERT", {}, Exception("duplicate key"))

    with pytest.raises(IntegrityError):
        retry_conflicts(always_conflicts)
    assert len(tries) == 3


def test_both_replicas_save_the_same_new_alert_state_at_once(pg_url: str) -> None:
    from monitor.alerting.store import StoredAlert, load_alert_states, save_alert_states

    stores = [Store(pg_url), Store(pg_url)]
    try:
        for n in range(ROUNDS):
            state = StoredAlert("rules.yml/g/EngineDown", f"fp{n:014d}", {"alertname": "EngineDown"}, {},
                                "pending", 100.0 + n, None, None, 0.0)
            together([lambda s=s, state=state: save_alert_states(s.engine, [state], []) for s in stores])
        assert sorted(a.fingerprint for a in load_alert_states(stores[0].engine)) == [
            f"fp{n:014d}" for n in range(ROUNDS)]
    finally:
        for s in stores:
            s.close()
