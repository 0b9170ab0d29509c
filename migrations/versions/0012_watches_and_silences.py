"""Watches (post when a host changes into a watched state), their alert claims and silences.

``watch_alerts`` holds one row per bad episode of a host for a watch; its unique constraint
``uq_watch_alerts_episode`` is the exactly-once claim across replicas (like ``report_runs``).
Ids of watches and silences are never reused on SQLite (``AUTOINCREMENT``).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'watches',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('host_name', sa.String(length=128), nullable=True),
        sa.Column('group_name', sa.String(length=64), nullable=True),
        sa.Column('channel', sa.String(length=100), nullable=False),
        sa.Column('conditions', JSON, nullable=False),
        sa.Column('repeat_s', sa.Integer(), nullable=True),
        sa.Column('created_by', sa.String(length=32), nullable=True),
        sa.Column('created_at', WHEN, nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_watches')),
        sqlite_autoincrement=True,
    )
    op.create_table(
        'watch_alerts',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('watch_id', sa.Integer(), nullable=False),
        sa.Column('host_name', sa.String(length=128), nullable=False),
        sa.Column('since_snapshot_id', sa.Integer(), nullable=False),
        sa.Column('confirmed_snapshot_id', sa.Integer(), nullable=False),
        sa.Column('states', JSON, nullable=False),
        sa.Column('started_at', WHEN, nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('claimed_by', sa.String(length=64), nullable=True),
        sa.Column('claimed_at', WHEN, nullable=False),
        sa.Column('channel', sa.String(length=100), nullable=True),
        sa.Column('message_ts', sa.String(length=32), nullable=True),
        sa.Column('last_posted_at', WHEN, nullable=True),
        sa.Column('resolved_at', WHEN, nullable=True),
        sa.Column('resolved_snapshot_id', sa.Integer(), nullable=True),
        sa.Column('taken_by', sa.String(length=32), nullable=True),
        sa.Column('taken_at', WHEN, nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(['watch_id'], ['watches.id'], name=op.f('fk_watch_alerts_watch_id_watches'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_watch_alerts')),
        sa.UniqueConstraint('watch_id', 'host_name', 'since_snapshot_id', name='uq_watch_alerts_episode'),
    )
    op.create_table(
        'silences',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('host_name', sa.String(length=128), nullable=True),
        sa.Column('group_name', sa.String(length=64), nullable=True),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('created_by', sa.String(length=32), nullable=True),
        sa.Column('created_at', WHEN, nullable=False),
        sa.Column('ends_at', WHEN, nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_silences')),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table('silences')
    op.drop_table('watch_alerts')
    op.drop_table('watches')
