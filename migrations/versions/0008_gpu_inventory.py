"""The GPU inventory (``gpu_inventory``): each GPU a host has shown, by UUID, with the last
snapshot it was seen in. Starts empty: hosts build it from their next probe on.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'gpu_inventory',
        sa.Column('host_name', sa.String(length=128), nullable=False),
        sa.Column('uuid', sa.String(length=96), nullable=False),
        sa.Column('gpu_index', sa.Integer(), nullable=True),
        sa.Column('bus_id', sa.String(length=32), nullable=True),
        sa.Column('name', sa.String(length=128), nullable=True),
        sa.Column('first_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_snapshot_id', sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint('host_name', 'uuid'),
    )


def downgrade() -> None:
    op.drop_table('gpu_inventory')
