"""The outbox and its sender on an injected clock: grouping with Alertmanager's meanings, dedup,
retries that deliver exactly once after an outage, deadlines, rate limits, restarts. The tests
that take `store_url` run on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import delete

from monitor.alerting.delivery import Delivery, render_delivery
from monitor.alerting.store import OutboxGroup
from monitor.catalog import CATALOG
from monitor.config import AlertingSettings, ReceiverSettings
from monitor.exporter import make_registry, render_text
from monitor.store.session import Store
from tests.alerting.helpers import Clock, alert, all_receivers, receiver
from tests.alerting.imserver import ImServer
from tests.support.golden import assert_promtool_accepts, emitted_families

Scenario = Callable[[Delivery, Clock], Awaitable[Any]]


def run(
    receivers: list[ReceiverSettings], scenario: Scenario, url: str = "sqlite://", clock: Clock | None = None
) -> Any:
    clock = clock or Clock()

    async def main() -> Any:
        store = Store(url)
        async with httpx.AsyncClient() as client:
            delivery = Delivery(AlertingSettings(receivers=receivers), store.engine, client, clock)
            try:
                return await scenario(delivery, clock)
            finally:
                store.close()

    return asyncio.run(main())


async def tick(delivery: Delivery, clock: Clock, seconds: float = 0.0) -> None:
    clock.advance(seconds)
    await delivery.run_once()


def names(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["labels"].get("gpu", ""), a["status"]) for a in body["alerts"]]


def test_group_wait_then_group_interval_then_repeat_interval() -> None:
    with ImServer() as im:

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert(gpu="1"), alert(gpu="2")], "embedded")
            await tick(d, clock)
            await tick(d, clock, 29)
            assert im.accepted("webhook") == []  # group_wait: 30s
            await tick(d, clock, 1)
            assert [names(b) for b in im.accepted("webhook")] == [[("1", "firing"), ("2", "firing")]]
            d.enqueue([alert(gpu="3")], "embedded")
            await tick(d, clock, 299)
            assert len(im.accepted("webhook")) == 1  # group_interval: 5m after the first flush
            await tick(d, clock, 1)
            assert names(im.accepted("webhook")[-1]) == [("1", "firing"), ("2", "firing"), ("3", "firing")]
            for _ in range(47):  # nothing changes: the next message is the repeat after 4h
                await tick(d, clock, 300)
            assert len(im.accepted("webhook")) == 2
            await tick(d, clock, 300)
            assert len(im.accepted("webhook")) == 3

        run([receiver(im, "webhook")], scenario)


def test_send_resolved_per_receiver_defaults() -> None:
    with ImServer() as im:
        rx = [receiver(im, "webhook", group_wait="1s"), receiver(im, "slack", group_wait="1s")]
        assert rx[0].send_resolved and not rx[1].send_resolved  # Alertmanager's defaults

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert(gpu="1"), alert(gpu="2")], "embedded")
            await tick(d, clock, 1)
            d.enqueue([alert(gpu="1", resolved_after=60)], "embedded")
            await tick(d, clock, 300)
            d.enqueue([alert(gpu="2", resolved_after=600)], "embedded")
            await tick(d, clock, 300)
            await tick(d, clock, 300)

        run(rx, scenario)
        assert [names(b) for b in im.accepted("webhook")] == [
            [("1", "firing"), ("2", "firing")],
            [("2", "firing"), ("1", "resolved")],
            [("2", "resolved")],
        ]
        slack = [str(b["blocks"]) for b in im.accepted("slack")]
        assert len(slack) == 1 and "resolved" not in slack[0]  # no resolved news, no resolved-only message


def test_same_transition_twice_is_stored_once(store_url: str) -> None:
    with ImServer() as im:

        async def scenario(d: Delivery, clock: Clock) -> tuple[int, int]:
            first = d.store([alert(gpu="1")], "embedded")
            again = d.store([alert(gpu="1")], "alertmanager")
            await tick(d, clock, 30)
            await tick(d, clock, 300)
            return first, again

        assert run([receiver(im, "webhook")], scenario, store_url) == (1, 0)
        assert len(im.accepted("webhook")) == 1


def test_receiver_down_for_several_rounds_gets_everything_once_after(store_url: str) -> None:
    with ImServer() as im:
        im.down("webhook")
        im.down("feishu")

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert("GPUHot", gpu="1")], "embedded")
            await tick(d, clock, 1)
            d.enqueue([alert("TargetDown", target="a")], "embedded")
            for _ in range(8):  # backoff 1, 2, 4, … : eight failed rounds
                await tick(d, clock, 60)
            assert d.failing == {"webhook-rx": True, "feishu-rx": True}
            assert d.pending == {"webhook-rx": 2, "feishu-rx": 2}
            im.up("webhook")
            im.up("feishu")
            for _ in range(5):
                await tick(d, clock, 60)
            assert d.failing == {"webhook-rx": False, "feishu-rx": False}
            assert d.pending == {"webhook-rx": 0, "feishu-rx": 0}
            text = "".join(str(s) for fam in render_delivery(d) for s in fam.samples)
            assert "'outcome': 'retried'" in text and "'outcome': 'sent'" in text

        run([receiver(im, "webhook", group_wait="1s"), receiver(im, "feishu", group_wait="1s")], scenario, store_url)
        assert im.attempts("webhook") > 8
        assert [b["commonLabels"]["alertname"] for b in im.accepted("webhook")] == ["GPUHot", "TargetDown"]
        assert len(im.accepted("feishu")) == 2


def test_retry_deadline_drops_and_counts() -> None:
    with ImServer() as im:
        im.down("wecom")

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert()], "embedded")
            for _ in range(6):
                await tick(d, clock, 5)
            assert d.counts[("wecom-rx", "dropped_expired")] == 1
            assert d.pending["wecom-rx"] == 0
            assert d.recent(5)[0]["deliveries"] == {"wecom-rx": "expired"}

        run([receiver(im, "wecom", group_wait="1s", retry_deadline="10s")], scenario)


def test_permanent_error_is_not_retried() -> None:
    with ImServer() as im:

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert()], "embedded")
            for _ in range(3):
                await tick(d, clock, 60)
            assert d.counts[("dingtalk-rx", "failed")] == 1 and d.failing["dingtalk-rx"]

        run([receiver(im, "dingtalk", group_wait="1s", secret="wrong")], scenario)
        assert im.attempts("dingtalk") == 1


def test_rate_limit_queues_never_drops() -> None:
    with ImServer() as im:

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert(f"Alert{i}") for i in range(25)], "embedded")
            await tick(d, clock, 1)
            assert len(im.accepted("dingtalk")) == 20 and d.pending["dingtalk-rx"] == 5
            await tick(d, clock, 30)
            assert len(im.accepted("dingtalk")) == 20
            await tick(d, clock, 31)
            assert len(im.accepted("dingtalk")) == 25 and d.pending["dingtalk-rx"] == 0

        run([receiver(im, "dingtalk", group_wait="1s")], scenario)


def test_alertmanager_transitions_skip_group_wait() -> None:
    with ImServer() as im:

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert()], "alertmanager")
            await tick(d, clock)

        run([receiver(im, "webhook")], scenario)
        assert len(im.accepted("webhook")) == 1


def test_queued_notifications_survive_a_restart(store_url: str) -> None:
    url = store_url
    clock = Clock()
    with ImServer() as im:
        im.down("slack")

        async def before(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert(gpu="1")], "embedded")
            await tick(d, clock, 1)

        async def after(d: Delivery, clock: Clock) -> None:
            await tick(d, clock, 5)
            await tick(d, clock, 5)

        rx = [receiver(im, "slack", group_wait="1s")]
        run(rx, before, url, clock)
        assert im.attempts("slack") == 1 and im.accepted("slack") == []
        im.up("slack")
        run(rx, after, url, clock)
        assert len(im.accepted("slack")) == 1


def test_recent_shows_delivery_state_per_receiver(store_url: str) -> None:
    with ImServer() as im:
        im.down("wecom")

        async def scenario(d: Delivery, clock: Clock) -> list[dict[str, Any]]:
            d.enqueue([alert(gpu="1")], "embedded")
            await tick(d, clock, 1)
            d.enqueue([alert(gpu="1", resolved_after=30)], "embedded")
            d.enqueue([alert(gpu="2")], "embedded")
            return d.recent(10)

        rx = [receiver(im, "webhook", group_wait="1s"), receiver(im, "wecom", group_wait="1s")]
        rows = run(rx, scenario, store_url)
        seen = [(r["labels"]["gpu"], r["status"]) for r in rows]
        assert seen == [("2", "firing"), ("1", "resolved"), ("1", "firing")]
        assert rows[2]["deliveries"] == {"webhook-rx": "sent", "wecom-rx": "pending"}
        assert rows[1]["deliveries"] == {"webhook-rx": "waiting", "wecom-rx": "waiting"}


def test_all_kinds_together() -> None:
    with ImServer() as im:

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert(gpu="1")], "embedded")
            await tick(d, clock, 30)

        run(all_receivers(im), scenario)
        assert [len(im.accepted(k)) for k in ("webhook", "slack", "feishu", "dingtalk", "wecom")] == [1] * 5


def test_self_metrics_are_catalogued_and_pass_promtool(tmp_path: Path) -> None:
    with ImServer() as im:
        im.fail_next("webhook", 1)

        async def scenario(d: Delivery, clock: Clock) -> str:
            d.enqueue([alert()], "embedded")
            await tick(d, clock, 1)
            await tick(d, clock, 5)
            return render_text(make_registry([lambda: render_delivery(d)])).decode()

        text = run([receiver(im, "webhook", group_wait="1s")], scenario)
    assert 'inference_monitor_notifications_total{outcome="retried",receiver="webhook-rx"} 1.0' in text
    assert 'inference_monitor_notifications_total{outcome="sent",receiver="webhook-rx"} 1.0' in text
    page = tmp_path / "delivery.prom"
    page.write_text(text)
    assert_promtool_accepts(page)
    emitted = {n + "_total" if f"{n}_total" in CATALOG else n for n in emitted_families(page)}
    # Delivery's families; the evaluator's firing counts are rendered (and tested) with the evaluator.
    delivery = {name for name, d in CATALOG.items() if d.layer == "alerting"} - {"inference_monitor_alerts_firing"}
    assert emitted == delivery


def test_two_replicas_sharing_the_database_send_once(store_url: str) -> None:
    url = store_url
    clock = Clock()
    with ImServer() as im:
        rx = [receiver(im, "webhook", group_wait="1s"), receiver(im, "feishu", group_wait="1s")]

        async def main() -> None:
            stores = [Store(url), Store(url)]
            async with httpx.AsyncClient() as client:
                a, b = (Delivery(AlertingSettings(receivers=rx), s.engine, client, clock) for s in stores)
                a.enqueue([alert(gpu="1"), alert("TargetDown", target="x")], "embedded")
                b.enqueue([alert(gpu="1")], "alertmanager")  # the same transition, reported by the other
                for _ in range(4):
                    clock.advance(1)
                    await asyncio.gather(a.run_once(), b.run_once())
            for s in stores:
                s.close()

        asyncio.run(main())
        assert sorted(b["commonLabels"]["alertname"] for b in im.accepted("webhook")) == ["GPUHot", "TargetDown"]
        assert len(im.accepted("feishu")) == 2


def test_alert_whose_group_a_concurrent_flush_deleted_is_still_delivered(store_url: str) -> None:
    with ImServer() as im:

        async def scenario(d: Delivery, clock: Clock) -> None:
            d.enqueue([alert()], "embedded")
            with d.outbox.engine.begin() as conn:  # as if another replica's flush had just removed it
                conn.execute(delete(OutboxGroup))
            await tick(d, clock, 1)
            await tick(d, clock, 1)

        run([receiver(im, "webhook", group_wait="1s")], scenario, store_url)
        assert len(im.accepted("webhook")) == 1
