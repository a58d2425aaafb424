"""Runbook annotations as links: the shipped rules name a runbook by its path in the repository
(`docs/runbooks/quality.md#qualityscorelow`), which nobody can click in Slack or Feishu. With
`alerting.runbook_base_url` set (e.g. `https://github.com/acme/inference-monitor/blob/main/`),
every receiver and the page get `<base>docs/runbooks/quality.md#qualityscorelow` instead.

A runbook that is already a URL, or prose ("Run nvidia-smi on ..."), is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from monitor.alerting.model import Alert

RUNBOOK_DIR = "docs/runbooks/"
_PATH = re.compile(r"^docs/runbooks/[\w./-]+\.md(?:#[\w-]+)?$")


def runbook_link(runbook: str, base_url: str | None) -> str:
    if not base_url or not _PATH.match(runbook):
        return runbook
    return base_url.rstrip("/") + "/" + runbook


def with_runbook_link(annotations: Mapping[str, str], base_url: str | None) -> dict[str, str]:
    linked = dict(annotations)
    if "runbook" in linked:
        linked["runbook"] = runbook_link(linked["runbook"], base_url)
    return linked


def link_alert(alert: Alert, base_url: str | None) -> Alert:
    if not base_url or "runbook" not in alert.annotations:
        return alert
    return Alert(alert.labels, with_runbook_link(alert.annotations, base_url), alert.starts_at, alert.ends_at,
                 alert.generator_url, alert.fingerprint)
