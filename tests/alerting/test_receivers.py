"""Each receiver against its stand-in: the documented payload and signature, the platform's error
codes read from a 200 answer, mentions escaped, size limits kept, secrets never in an error."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from monitor.alerting.receivers import build_receiver
from monitor.alerting.receivers.base import Notification, Outcome, RateLimit, Secret
from monitor.alerting.receivers.webhook import ZERO_TIME
from tests.alerting.helpers import alert, receiver
from tests.alerting.imserver import BEARER, KINDS, SECRETS, TOKENS, ImServer


def _notification(*alerts: Any, name: str = "rx") -> Notification:
    return Notification(name, "k", {"alertname": alerts[0].name}, list(alerts), "http://monitor:9480")


def _send(im: ImServer, kind: str, notification: Notification, **overrides: Any) -> Outcome:
    async def run() -> Outcome:
        async with httpx.AsyncClient() as client:
            return await build_receiver(receiver(im, kind, **overrides), client).send(notification)

    return asyncio.run(run())


@pytest.mark.parametrize("kind", KINDS)
def test_each_platform_accepts_the_signed_message(kind: str) -> None:
    with ImServer() as im:
        outcome = _send(im, kind, _notification(alert(gpu="3"), alert(gpu="4", resolved_after=60)))
        assert outcome == Outcome(True), im.requests[-1].answer
        assert len(im.accepted(kind)) == 1


def test_webhook_payload_is_alertmanager_v4() -> None:
    with ImServer() as im:
        firing, resolved = alert(gpu="3"), alert(gpu="4", resolved_after=60)
        _send(im, "webhook", _notification(firing, resolved, name="ops"))
        body = im.accepted("webhook")[0]
    assert set(body) == {"version", "status", "receiver", "groupLabels", "commonLabels", "commonAnnotations",
                         "externalURL", "groupKey", "truncatedAlerts", "alerts"}
    assert body["version"] == "4" and body["status"] == "firing" and body["receiver"] == "ops"
    assert body["groupKey"] == '{}:{alertname="GPUHot"}' and body["truncatedAlerts"] == 0
    assert body["commonLabels"] == {"alertname": "GPUHot", "severity": "warning"}
    first, second = body["alerts"]
    assert first["endsAt"] == ZERO_TIME and first["startsAt"] == "2026-11-30T12:00:00Z"
    assert second["status"] == "resolved" and second["endsAt"] == "2026-11-30T12:01:00Z"
    assert first["fingerprint"] == firing.fingerprint and set(first) == {
        "status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}


def test_wrong_signature_is_a_final_failure() -> None:
    with ImServer() as im:
        for kind in ("feishu", "dingtalk"):
            outcome = _send(im, kind, _notification(alert()), secret="not-the-secret")
            assert not outcome.sent and not outcome.retry
            assert ("19021" if kind == "feishu" else "310000") in outcome.error


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limit_answers_are_retried(kind: str) -> None:
    with ImServer() as im:
        im.fail_next(kind, 1)
        outcome = _send(im, kind, _notification(alert()))
        assert not outcome.sent and outcome.retry, outcome
        assert _send(im, kind, _notification(alert())).sent


def test_mentions_in_label_values_are_escaped() -> None:
    hostile = alert(pod='x <at user_id="all">all</at> @all <@U123> <!channel>')
    with ImServer() as im:
        for kind in ("feishu", "dingtalk", "wecom", "slack"):
            assert _send(im, kind, _notification(hostile)).sent
        texts = {
            "feishu": im.accepted("feishu")[0]["card"]["elements"][0]["text"]["content"],
            "dingtalk": im.accepted("dingtalk")[0]["markdown"]["text"],
            "wecom": im.accepted("wecom")[0]["markdown"]["content"],
            "slack": str(im.accepted("slack")[0]["blocks"]),
        }
    for kind, text in texts.items():
        assert "<at" not in text and "<@" not in text and "<!channel>" not in text, kind
        if kind != "slack":
            assert "@all" not in text, kind
    assert "&lt;!channel&gt;" in texts["slack"]


def test_markdown_links_and_images_in_label_values_are_escaped() -> None:
    link, image = "[Re-login](http://phish.example/login)", "![](http://track.example/pixel.png)"
    hostile = alert(pod=f"x {link} {image}")
    hostile = type(hostile)(hostile.labels, {**hostile.annotations, "description": f"see {link}"},
                            hostile.starts_at)
    with ImServer() as im:
        for kind in ("feishu", "dingtalk", "wecom"):
            assert _send(im, kind, _notification(hostile)).sent
        texts = {
            "feishu": im.accepted("feishu")[0]["card"]["elements"][0]["text"]["content"],
            "dingtalk": im.accepted("dingtalk")[0]["markdown"]["text"],
            "wecom": im.accepted("wecom")[0]["markdown"]["content"],
        }
    for kind, text in texts.items():
        assert not re.search(r"\[[^\]]*\]\(", text), kind  # no [text](url) nor ![alt](url) left
        assert "［Re-login］(http://phish.example/login)" in text, kind  # still readable
        assert "!［］(http://track.example/pixel.png)" in text, kind


def test_summary_first_then_context_description_labels() -> None:
    a = alert(gpu="3")
    a = type(a)(a.labels, {**a.annotations, "context": "node-1 GPU 3 runs vllm-a", "probable_cause": "fan"},
                a.starts_at)
    with ImServer() as im:
        _send(im, "wecom", _notification(a))
        text = im.accepted("wecom")[0]["markdown"]["content"]
    order = [text.index(s) for s in ("GPUHot on", "context: node-1", "probable_cause: fan", "value is 87", "gpu=3")]
    assert order == sorted(order)


def test_oversized_messages_are_truncated_with_a_note() -> None:
    many = [alert(gpu=str(i), detail="x" * 300) for i in range(60)]
    with ImServer() as im:
        for kind in ("wecom", "slack", "dingtalk", "feishu"):
            assert _send(im, kind, _notification(*many)).sent, kind
        content = im.accepted("wecom")[0]["markdown"]["content"]
        assert len(content.encode()) <= 4096 and "more alert(s) not shown" in content
        assert "not shown" in str(im.accepted("slack")[0]["blocks"][-1])
        huge = alert(detail="é" * 10_000)
        assert _send(im, "wecom", _notification(huge)).sent
        assert "truncated" in im.accepted("wecom")[-1]["markdown"]["content"]


def test_errors_never_carry_the_url_token_or_secret() -> None:
    with ImServer() as im:
        im.down("dingtalk")
        outcome = _send(im, "dingtalk", _notification(alert()))
        dead = "http://127.0.0.1:1/open-apis/bot/v2/hook/" + TOKENS["feishu"]
        refused = _send(im, "feishu", _notification(alert()), url=dead)
    for result in (outcome, refused):
        assert not result.sent and result.retry and result.error
        for secret in (*TOKENS.values(), *SECRETS.values(), BEARER):
            assert secret not in result.error


def test_secret_prints_as_placeholder() -> None:
    secret = Secret("hunter2")
    assert str(secret) == repr(secret) == f"{secret}" == "<secret>" and secret.reveal() == "hunter2"


def test_rate_limit_queues_instead_of_dropping() -> None:
    limit = RateLimit(20, 60.0)
    for i in range(20):
        assert limit.wait(100.0 + i) == 0
        limit.record(100.0 + i)
    assert limit.wait(110.0) == pytest.approx(50.0)  # the 21st waits for the first to age out
    assert limit.wait(160.0) == 0
