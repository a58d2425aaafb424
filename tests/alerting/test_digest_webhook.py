"""The weekly digest posted as a webhook (`history.digest`): the monitor's digest job, on a store
seeded with known weeks, queues it in the alerts' outbox and the sender posts it to real receivers
on loopback — once, after a receiver's outage too; off by default; a bad key fails at start."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger

from monitor.config import ConfigError, load_settings
from monitor.history.store import HistoryTables
from monitor.runtime import Monitor
from monitor.store.session import Store
from tests.alerting.helpers import Clock, receiver_data
from tests.alerting.imserver import BEARER, ImServer
from tests.history.test_digest import NOW, seeded

IM_KINDS = ("slack", "feishu", "dingtalk", "wecom")


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'infermon.db'}"
    monkeypatch.setenv("INFERMON_STORAGE__URL", url)
    return seed(url)


def seed(url: str) -> str:
    store = Store(url)
    try:
        HistoryTables(store.engine).write(seeded())
    finally:
        store.close()
    return url


def settings_for(im: ImServer, kinds: tuple[str, ...], **digest: Any) -> Any:
    receivers = [receiver_data(im, kind) for kind in kinds]
    digest = {"enabled": True, "receivers": [r["name"] for r in receivers], **digest}
    return load_settings(None, {"infra": {"nvml": {"enabled": False}}, "alerting": {"receivers": receivers},
                                "history": {"digest": digest}})


def run(settings: Any, clock: Clock, scenario: Callable[[Monitor], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        monitor = Monitor(settings, wall=clock)
        try:
            return await scenario(monitor)
        finally:
            await monitor.aclose()

    return asyncio.run(main())


async def send(monitor: Monitor, clock: Clock, seconds: float = 0.0) -> None:
    clock.advance(seconds)
    await monitor.delivery.run_once()


def test_the_digest_job_posts_the_weeks_numbers_once_to_a_generic_webhook_and_text_to_im_bots(url: str) -> None:
    clock = Clock(NOW)
    with ImServer() as im:
        settings = settings_for(im, ("webhook", *IM_KINDS))

        async def scenario(monitor: Monitor) -> list[list[str]]:
            first = await monitor.post_digest()
            await send(monitor, clock)
            for _ in range(IM_KINDS.index("wecom") + 2):  # Slack: one message a second
                await send(monitor, clock, 1.5)
            again = await monitor.post_digest()  # the same day (a restart, a second replica): nothing new
            await send(monitor, clock, 5)
            return [first, again]

        first, again = run(settings, clock, scenario)
        assert sorted(first) == sorted(f"{kind}-rx" for kind in ("webhook", *IM_KINDS)) and again == []
        [body] = im.accepted("webhook")
        [request] = [r for r in im.requests if r.kind == "webhook"]
        assert request.headers.get("idempotency-key") == "digest:2026-05-28"
        assert request.headers.get("authorization") == f"Bearer {BEARER}"
        assert body["now"] == NOW
        models = {m["model"]: m for m in body["models"]}
        assert sorted(models) == ["creeping", "steady"]
        ttft = models["creeping"]["figures"]["ttft_p99_seconds"]
        assert ttft["this_week"] == pytest.approx(0.3) and ttft["last_week"] == pytest.approx(0.2)
        assert ttft["ratio"] == pytest.approx(1.5)
        assert models["creeping"]["figures"]["quality_score"]["this_week"] == pytest.approx(4.0)
        for kind in IM_KINDS:
            [message] = im.accepted(kind)
            text = str(message)
            assert "creeping" in text and "P99 TTFT" in text and "+50" in text, kind


def test_a_receiver_down_at_first_gets_the_digest_when_it_comes_back_exactly_once(store_url: str) -> None:
    """On SQLite and on a real PostgreSQL server (the outbox's two stores)."""
    seed(store_url)
    clock = Clock(NOW)
    with ImServer() as im:
        settings = settings_for(im, ("webhook",))
        im.down("webhook")

        async def scenario(monitor: Monitor) -> tuple[int, int]:
            await monitor.post_digest()
            for _ in range(3):  # backoff 1 s, 2 s: three tries while it is down
                await send(monitor, clock, 4)
            tried_while_down = im.attempts("webhook")
            im.up("webhook")
            await send(monitor, clock, 8)
            await monitor.post_digest()  # a later run the same day queues nothing
            for _ in range(3):
                await send(monitor, clock, 60)
            return tried_while_down, len(im.accepted("webhook"))

        tried_while_down, delivered = run(settings, clock, scenario)
        assert tried_while_down >= 2
        assert delivered == 1
        [body] = im.accepted("webhook")
        assert {m["model"] for m in body["models"]} == {"creeping", "steady"}


def test_the_digest_is_off_by_default_and_posts_nothing(url: str) -> None:
    clock = Clock(NOW)
    with ImServer() as im:
        settings = load_settings(None, {"infra": {"nvml": {"enabled": False}},
                                        "alerting": {"receivers": [receiver_data(im, "webhook")]}})
        assert settings.history.digest.enabled is False

        async def scenario(monitor: Monitor) -> list[str]:
            for _ in range(3):
                await send(monitor, clock, 5)
            return [job.name for job in monitor.jobs]

        jobs = run(settings, clock, scenario)
        assert "history_digest" not in jobs
        assert im.attempts("webhook") == 0


def test_the_job_is_scheduled_weekly_at_the_configured_hour_in_its_time_zone(url: str) -> None:
    clock = Clock(NOW)
    with ImServer() as im:
        settings = settings_for(im, ("webhook",), weekday="tue", hour=7, timezone="Asia/Shanghai")

        async def scenario(monitor: Monitor) -> Any:
            return next(job for job in monitor.jobs if job.name == "history_digest")

        job = run(settings, clock, scenario)
    zone = ZoneInfo("Asia/Shanghai")
    trigger = CronTrigger.from_crontab(job.cron, timezone=ZoneInfo(job.timezone))  # as app._add_job builds it
    after = datetime(2026, 12, 6, 12, 0, tzinfo=zone)  # a Sunday
    fire = trigger.get_next_fire_time(None, after)
    assert fire == datetime(2026, 12, 8, 7, 0, tzinfo=zone)  # the Tuesday, 07:00 Shanghai time


@pytest.mark.parametrize(("digest", "key"), [
    ({"enabled": True, "receivers": ["nobody"]}, "history.digest.receivers.0"),
    ({"enabled": True}, "history.digest.receivers"),
    ({"enabled": True, "receivers": ["webhook-rx"], "weekdy": "mon"}, "history.digest.weekdy"),
    ({"enabled": True, "receivers": ["webhook-rx"], "hour": 24}, "history.digest.hour"),
    ({"enabled": True, "receivers": ["webhook-rx"], "timezone": "Mars/Base"}, "history.digest.timezone"),
])
def test_a_bad_digest_setting_fails_at_start_naming_its_key(tmp_path: Path, digest: dict[str, Any], key: str) -> None:
    with ImServer() as im, pytest.raises(ConfigError) as failed:
        load_settings(None, {"alerting": {"receivers": [receiver_data(im, "webhook")]}, "history": {"digest": digest}})
    assert key in str(failed.value)
