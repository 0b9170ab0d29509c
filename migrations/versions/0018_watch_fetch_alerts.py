"""Watch posts about downloads (``watch_fetch_alerts``): one row per watch, download and state
(``fetch-stalled``, ``fetch-failed``), the claim that makes it said once.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'watch_fetch_alerts',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('watch_id', sa.Integer(), nullable=False),
        sa.Column('fetch_id', sa.Integer(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('host_name', sa.String(length=128), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('claimed_by', sa.String(length=64), nullable=True),
        sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('channel', sa.String(length=100), nullable=True),
        sa.Column('message_ts', sa.String(length=32), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ['watch_id'], ['watches.id'], name=op.f('fk_watch_fetch_alerts_watch_id_watches'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_watch_fetch_alerts')),
        sa.UniqueConstraint('watch_id', 'fetch_id', 'state', name='uq_watch_fetch_alerts_state'),
    )


def downgrade() -> None:
    op.drop_table('watch_fetch_alerts')
