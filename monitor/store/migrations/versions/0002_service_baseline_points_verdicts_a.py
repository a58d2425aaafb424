"""service_baseline_points: the service baselines' series at a coarse cadence, reloaded at start-up
(monitor/store/baseline.py). Branch verdicts-a (issue #17).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:10:21.491210
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("service_baseline_points"):
        return  # a database made by create_all (tests, or before migrations existed) already has it
    op.create_table('service_baseline_points',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('target', sa.String(length=300), nullable=False),
    sa.Column('ts', sa.Float(), nullable=False),
    sa.Column('engine', sa.String(length=64), nullable=False),
    sa.Column('generation', sa.String(length=64), nullable=False),
    sa.Column('series', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('service_baseline_points', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_service_baseline_points_target'), ['target'], unique=False)
        batch_op.create_index(batch_op.f('ix_service_baseline_points_ts'), ['ts'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('service_baseline_points', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_service_baseline_points_ts'))
        batch_op.drop_index(batch_op.f('ix_service_baseline_points_target'))

    op.drop_table('service_baseline_points')
