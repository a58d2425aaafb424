"""Alertmanager's grouping decisions as pure functions (dispatch.go, notify.go's DedupStage).

A receiver's alerts fall into groups by the values of its `group_by` labels (`...` = all
labels). A new group flushes after `group_wait`, then every `group_interval`; a flush sends the
whole group when something changed since the last message (a new firing alert; a newly
resolved one when `send_resolved`), or when `repeat_interval` passed with alerts still firing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from monitor.alerting.model import Alert


def group_labels(labels: Mapping[str, str], group_by: Sequence[str]) -> dict[str, str]:
    """The group's label set: group_by labels the alert has (all of them for `...`)."""
    if "..." in group_by:
        return dict(labels)
    return {name: labels[name] for name in group_by if name in labels}


def group_id(receiver: str, labels: Mapping[str, str]) -> str:
    text = json.dumps([receiver, sorted(labels.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def transition_key(alert: Alert) -> str:
    """One transition, whoever reports it and however often: fingerprint, status, start and end."""
    ends = alert.ends_at.isoformat() if alert.ends_at else ""
    text = f"{alert.fingerprint}|{alert.status}|{alert.starts_at.isoformat()}|{ends}"
    return hashlib.sha256(text.encode()).hexdigest()


def supersedes(new: Alert, old: Alert) -> bool:
    """Whether `new` is a later state of the same alert than `old` (a late duplicate is not)."""
    if not _same(new.starts_at, old.starts_at):
        return new.starts_at.timestamp() > old.starts_at.timestamp()
    if new.status != old.status:
        return new.status == "resolved"
    return new.ends_at is not None and old.ends_at is not None and new.ends_at.timestamp() > old.ends_at.timestamp()


def _same(a: datetime, b: datetime) -> bool:
    return abs(a.timestamp() - b.timestamp()) < 1e-5  # stored as float seconds: microseconds may wobble


@dataclass(frozen=True)
class LastNotification:
    """What the group's last message said (Alertmanager's notification-log entry)."""

    firing: frozenset[str]
    resolved: frozenset[str]
    sent_at: float


def needs_update(
    last: LastNotification | None,
    firing: set[str],
    resolved: set[str],
    send_resolved: bool,
    repeat_interval: float,
    now: float,
) -> bool:
    if last is None:
        return bool(firing)  # a group that only ever held resolved alerts says nothing
    if not firing <= last.firing:
        return True
    if not firing:
        # All resolved: "notify" to clear the log even without send_resolved (nothing is sent
        # then); if the receiver never heard of any firing alert, there is nothing to say.
        return bool(last.firing)
    if send_resolved and not resolved <= last.resolved:
        return True
    return last.sent_at <= now - repeat_interval
