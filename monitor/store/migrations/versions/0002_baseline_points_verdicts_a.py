"""The baselines' history across restarts: service_baseline_points (monitor/service/baseline.py: per
target, the baseline series at a coarse cadence) and cost_baseline_points (monitor/cost/store.py: the
$/token baseline's samples). Branch verdicts-a.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:32:00.729813
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())  # create_all made them (tests, old databases)
    if "cost_baseline_points" not in existing:
        op.create_table(
            "cost_baseline_points",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("model", sa.String(length=300), nullable=False),
            sa.Column("window", sa.String(length=32), nullable=False),
            sa.Column("ts", sa.Float(), nullable=False),
            sa.Column("usd_per_hour", sa.Float(), nullable=False),
            sa.Column("tokens_per_second", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_cost_baseline_points_ts", "cost_baseline_points", ["ts"], unique=False)
    if "service_baseline_points" not in existing:
        op.create_table(
            "service_baseline_points",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("target", sa.String(length=300), nullable=False),
            sa.Column("ts", sa.Float(), nullable=False),
            sa.Column("engine", sa.String(length=64), nullable=False),
            sa.Column("generation", sa.String(length=64), nullable=False),
            sa.Column("series", sa.Text(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_service_baseline_points_target", "service_baseline_points", ["target"], unique=False)
        op.create_index("ix_service_baseline_points_ts", "service_baseline_points", ["ts"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('service_baseline_points', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_service_baseline_points_ts'))
        batch_op.drop_index(batch_op.f('ix_service_baseline_points_target'))

    op.drop_table('service_baseline_points')
    with op.batch_alter_table('cost_baseline_points', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_cost_baseline_points_ts'))

    op.drop_table('cost_baseline_points')
