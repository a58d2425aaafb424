"""One module per receiver type behind one interface (`base.Receiver`): adding one is adding a file."""

from __future__ import annotations

import httpx

from monitor.alerting.receivers.base import HttpReceiver, Receiver
from monitor.alerting.receivers.dingtalk import DingTalkReceiver
from monitor.alerting.receivers.feishu import FeishuReceiver
from monitor.alerting.receivers.slack import SlackReceiver
from monitor.alerting.receivers.webhook import WebhookReceiver
from monitor.alerting.receivers.wecom import WeComReceiver
from monitor.config import ReceiverSettings

KINDS: dict[str, type[HttpReceiver]] = {
    "webhook": WebhookReceiver,
    "slack": SlackReceiver,
    "feishu": FeishuReceiver,
    "dingtalk": DingTalkReceiver,
    "wecom": WeComReceiver,
}


def build_receiver(settings: ReceiverSettings, client: httpx.AsyncClient) -> Receiver:
    return KINDS[settings.type](settings, client)
