"""Baseline: every table as the first release with migrations has it.

A database created before migrations existed (the store called `create_all`) has some or all
of these tables and no `alembic_version`: the upgrade creates only the missing ones, so such a
database joins the migration history here instead of failing on "table already exists".

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# table -> its indexes as (name, columns); a column declared with index=True gets ix_<table>_<column>
INDEXES: dict[str, list[tuple[str, list[str]]]] = {
    "collector_events": [("ix_collector_events_ts", ["ts"])],
    "alert_transitions": [("ix_alert_transitions_created_at", ["created_at"])],
    "outbox_groups": [("ix_outbox_groups_next_flush_at", ["next_flush_at"])],
    "outbox_notifications": [
        ("ix_outbox_notifications_created_at", ["created_at"]),
        ("ix_outbox_notifications_due", ["state", "receiver", "next_attempt_at"]),
    ],
    "quality_samples": [("ix_quality_samples_model", ["model"]), ("ix_quality_samples_ts", ["ts"])],
    "quality_runs": [("ix_quality_runs_date", ["date"])],
    "quality_judgments": [("ix_quality_judgments_run_id", ["run_id"])],
}


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def _create(name: str, *items: sa.schema.SchemaItem) -> None:
    if sa.inspect(op.get_bind()).has_table(name):
        return  # created by create_all before migrations existed
    op.create_table(name, *items)
    for index, columns in INDEXES.get(name, []):
        op.create_index(index, name, columns, unique=False)


def upgrade() -> None:
    _create(
        "collector_events",
        _id(),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("collector", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    _create(
        "alert_state",
        sa.Column("rule", sa.String(length=512), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("annotations", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("active_at", sa.Float(), nullable=False),
        sa.Column("fired_at", sa.Float(), nullable=True),
        sa.Column("keep_firing_since", sa.Float(), nullable=True),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("rule", "fingerprint"),
    )
    _outbox()
    _cost()
    _quality()


def _outbox() -> None:
    _create(
        "alert_transitions",
        _id(),
        sa.Column("dedup_key", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("annotations", sa.Text(), nullable=False),
        sa.Column("starts_at", sa.Float(), nullable=False),
        sa.Column("ends_at", sa.Float(), nullable=True),
        sa.Column("generator_url", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dedup_key"),
    )
    _create(
        "outbox_groups",
        _id(),
        sa.Column("receiver", sa.String(length=128), nullable=False),
        sa.Column("group_key", sa.String(length=64), nullable=False),
        sa.Column("group_labels", sa.Text(), nullable=False),
        sa.Column("next_flush_at", sa.Float(), nullable=False),
        sa.Column("last_sent_at", sa.Float(), nullable=True),
        sa.Column("notified_firing", sa.Text(), nullable=False),
        sa.Column("notified_resolved", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("receiver", "group_key"),
    )
    _create(
        "outbox_members",
        _id(),
        sa.Column("receiver", sa.String(length=128), nullable=False),
        sa.Column("group_key", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("transition_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("receiver", "group_key", "fingerprint"),
    )
    _create(
        "outbox_notifications",
        _id(),
        sa.Column("receiver", sa.String(length=128), nullable=False),
        sa.Column("group_key", sa.String(length=64), nullable=False),
        sa.Column("group_labels", sa.Text(), nullable=False),
        sa.Column("transition_ids", sa.Text(), nullable=False),
        sa.Column("truncated_alerts", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("deadline", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )


def _cost() -> None:
    _create(
        "cost_totals",
        sa.Column("scope", sa.String(length=300), nullable=False),
        sa.Column("usd", sa.Float(), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.Column("usd_per_hour", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("scope"),
    )
    _create(
        "cost_days",
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("scope", sa.String(length=300), nullable=False),
        sa.Column("usd", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("day", "scope"),
    )


def _quality() -> None:
    _create(
        "quality_samples",
        _id(),
        sa.Column("key", sa.String(length=220), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("request_id", sa.String(length=200), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    _create(
        "quality_runs",
        _id(),
        sa.Column("date", sa.String(length=10), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("finished", sa.Float(), nullable=True),
        sa.Column("available", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("date", "model"),
    )
    _create(
        "quality_judgments",
        _id(),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("sample_key", sa.String(length=220), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("request_id", sa.String(length=200), nullable=True),
        sa.Column("trace_id", sa.String(length=200), nullable=True),
        sa.Column("observation_id", sa.String(length=200), nullable=True),
        sa.Column("length_tokens", sa.Integer(), nullable=False),
        sa.Column("length_estimated", sa.Boolean(), nullable=False),
        sa.Column("refusal_keyword", sa.Boolean(), nullable=False),
        sa.Column("judged_at", sa.Float(), nullable=True),
        sa.Column("score", sa.Integer(), nullable=True),
        sa.Column("refusal", sa.Boolean(), nullable=True),
        sa.Column("hallucination", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("judge_output_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["quality_runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "sample_key"),
    )


def downgrade() -> None:
    for name in ("quality_judgments", "quality_runs", "quality_samples", "cost_days", "cost_totals",
                 "outbox_notifications", "outbox_members", "outbox_groups", "alert_transitions", "alert_state",
                 "collector_events"):
        op.drop_table(name)  # its indexes go with it
