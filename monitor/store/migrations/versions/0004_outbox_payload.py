"""A message of the outbox that carries no alerts (the weekly digest, monitor/alerting/digest.py):
outbox_notifications.payload.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06 06:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("outbox_notifications")}
    if "payload" not in columns:  # create_all made it (tests, old databases)
        with op.batch_alter_table("outbox_notifications", schema=None) as batch_op:
            batch_op.add_column(sa.Column("payload", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox_notifications", schema=None) as batch_op:
        batch_op.drop_column("payload")
