"""History and reports: report schedules, report runs (the exactly-once claim), history indexes.

``ix_snapshots_history`` covers ``/gpu history`` (see docs/benchmarks.md); ``ix_snapshots_taken_at``
lets retention find old rows of every host.

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-29 16:38:05.932727
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0004'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('report_schedules',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cron', sa.String(length=64), nullable=False),
    sa.Column('tz', sa.String(length=64), nullable=False),
    sa.Column('group_name', sa.String(length=64), nullable=True),
    sa.Column('channel', sa.String(length=100), nullable=False),
    sa.Column('created_by', sa.String(length=32), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_report_schedules'))
    )
    op.create_table('report_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('schedule_id', sa.Integer(), nullable=False),
    sa.Column('fire_time', sa.DateTime(timezone=True), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('claimed_by', sa.String(length=64), nullable=True),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('snapshot_ids', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('message_ts', sa.String(length=32), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['schedule_id'], ['report_schedules.id'], name=op.f('fk_report_runs_schedule_id_report_schedules'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_report_runs')),
    sa.UniqueConstraint('schedule_id', 'fire_time', name='uq_report_runs_schedule_fire')
    )
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.create_index('ix_snapshots_history', ['host_name', 'taken_at', 'verdict', 'gpu_used_mib', 'disk_free_bytes'], unique=False)
        batch_op.create_index('ix_snapshots_taken_at', ['taken_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.drop_index('ix_snapshots_taken_at')
        batch_op.drop_index('ix_snapshots_history')

    op.drop_table('report_runs')
    op.drop_table('report_schedules')
