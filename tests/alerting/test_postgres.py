"""The outbox on a real PostgreSQL server: the same guarantees as on SQLite (dedup, grouping,
exactly once after an outage, two replicas sharing the database send once)."""

from __future__ import annotations

import asyncio

import httpx

from monitor.alerting.delivery import Delivery
from monitor.config import AlertingSettings
from monitor.store.session import Store
from tests.alerting.helpers import Clock, alert, receiver
from tests.alerting.imserver import ImServer


def test_outage_then_exactly_once_on_postgres(pg_url: str) -> None:
    clock = Clock()
    with ImServer() as im:
        im.down("webhook")
        rx = [receiver(im, "webhook", group_wait="1s"), receiver(im, "wecom", group_wait="1s")]

        async def main() -> list[dict[str, object]]:
            store = Store(pg_url)
            async with httpx.AsyncClient() as client:
                d = Delivery(AlertingSettings(receivers=rx), store.engine, client, clock)
                assert d.store([alert(gpu="1"), alert("TargetDown", target="a")], "embedded") == 2
                assert d.store([alert(gpu="1")], "alertmanager") == 0
                for _ in range(6):
                    clock.advance(30)
                    await d.run_once()
                im.up("webhook")
                for _ in range(3):
                    clock.advance(60)
                    await d.run_once()
                recent = d.recent(5)
            store.close()
            return recent

        recent = asyncio.run(main())
        assert sorted(b["commonLabels"]["alertname"] for b in im.accepted("webhook")) == ["GPUHot", "TargetDown"]
        assert len(im.accepted("wecom")) == 2
        assert all(r["deliveries"] == {"webhook-rx": "sent", "wecom-rx": "sent"} for r in recent)


def test_two_replicas_on_postgres_send_once(pg_url: str) -> None:
    clock = Clock()
    with ImServer() as im:
        rx = [receiver(im, "webhook", group_wait="1s"), receiver(im, "feishu", group_wait="1s")]

        async def main() -> None:
            stores = [Store(pg_url), Store(pg_url)]
            async with httpx.AsyncClient() as client:
                a, b = (Delivery(AlertingSettings(receivers=rx), s.engine, client, clock) for s in stores)
                a.enqueue([alert(gpu="1"), alert("TargetDown", target="x")], "embedded")
                b.enqueue([alert(gpu="1")], "alertmanager")
                for _ in range(4):
                    clock.advance(1)
                    await asyncio.gather(a.run_once(), b.run_once())
            for s in stores:
                s.close()

        asyncio.run(main())
        assert sorted(b["commonLabels"]["alertname"] for b in im.accepted("webhook")) == ["GPUHot", "TargetDown"]
        assert len(im.accepted("feishu")) == 2
