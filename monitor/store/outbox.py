"""Outbox tables: alert transitions, per-receiver groups, and the notifications waiting to go out.

    alert_transitions     one row per distinct transition (fingerprint + status + startsAt/endsAt)
    outbox_members        the alerts each receiver's group currently holds (latest transition each)
    outbox_groups         a receiver's aggregation group: when it flushes next, what it last notified
    outbox_notifications  one message for one receiver, kept until it is sent, fails or expires

Everything is written before anything is sent, so a restart (or `kill -9`) loses nothing.
Times are Unix seconds; label sets and payloads are JSON text (portable across SQLite/PostgreSQL).
"""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from monitor.store.models import Base


class AlertTransition(Base):
    __tablename__ = "alert_transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dedup_key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of fingerprint/status/times
    created_at: Mapped[float] = mapped_column(Float, index=True)
    source: Mapped[str] = mapped_column(String(16))  # embedded | alertmanager
    fingerprint: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(8))  # firing | resolved
    labels: Mapped[str] = mapped_column(Text)
    annotations: Mapped[str] = mapped_column(Text)
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    generator_url: Mapped[str] = mapped_column(Text, default="")


class OutboxGroup(Base):
    __tablename__ = "outbox_groups"
    __table_args__ = (UniqueConstraint("receiver", "group_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    receiver: Mapped[str] = mapped_column(String(128))
    group_key: Mapped[str] = mapped_column(String(64))
    group_labels: Mapped[str] = mapped_column(Text)
    next_flush_at: Mapped[float] = mapped_column(Float, index=True)
    last_sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    notified_firing: Mapped[str] = mapped_column(Text, default="[]")  # fingerprints in the last message
    notified_resolved: Mapped[str] = mapped_column(Text, default="[]")


class OutboxMember(Base):
    __tablename__ = "outbox_members"
    __table_args__ = (UniqueConstraint("receiver", "group_key", "fingerprint"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    receiver: Mapped[str] = mapped_column(String(128))
    group_key: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(16))
    transition_id: Mapped[int] = mapped_column(Integer)


class OutboxNotification(Base):
    __tablename__ = "outbox_notifications"
    __table_args__ = (Index("ix_outbox_notifications_due", "state", "receiver", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    receiver: Mapped[str] = mapped_column(String(128))
    group_key: Mapped[str] = mapped_column(String(64))
    group_labels: Mapped[str] = mapped_column(Text)
    transition_ids: Mapped[str] = mapped_column(Text)  # JSON list: the alerts this message carries
    truncated_alerts: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16))  # pending | sent | failed | expired
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    deadline: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
