"""The long-horizon history the trend rules read: history_series (a metric name and its labels)
and history_days (one row per series and UTC day, its 5-minute points as a blob):
monitor/history/store.py.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-06 02:14:01.105733
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())  # create_all made them (tests, old databases)
    if "history_days" not in existing:
        op.create_table(
            "history_days",
            sa.Column("series_id", sa.Integer(), nullable=False),
            sa.Column("day", sa.Integer(), nullable=False),
            sa.Column("points", sa.LargeBinary(), nullable=False),
            sa.PrimaryKeyConstraint("series_id", "day"),
        )
        op.create_index("ix_history_days_day", "history_days", ["day"], unique=False)
    if "history_series" not in existing:
        op.create_table(
            "history_series",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("key", sa.String(length=1000), nullable=False),
            sa.Column("name", sa.String(length=200), nullable=False),
            sa.Column("labels", sa.Text(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
            sa.UniqueConstraint("key"),
        )
        op.create_index("ix_history_series_name", "history_series", ["name"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_history_series_name", table_name="history_series")
    op.drop_table("history_series")
    op.drop_index("ix_history_days_day", table_name="history_days")
    op.drop_table("history_days")
