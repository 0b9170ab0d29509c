"""Fan-out workers as they last reported (``fleet_workers``): their open pooled SSH connections,
which serve's ``/metrics`` sums (the pools live in the worker processes).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'fleet_workers',
        sa.Column('executor_id', sa.String(length=80), nullable=False),
        sa.Column('ssh_pooled', sa.Integer(), nullable=False),
        sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('executor_id', name=op.f('pk_fleet_workers')),
    )


def downgrade() -> None:
    op.drop_table('fleet_workers')
