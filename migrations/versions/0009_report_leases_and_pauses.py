"""Scheduled reports: a lease on each claimed run (``report_runs.heartbeat_at``, ``attempts``) so
another instance retries a report whose holder died before posting; channel failures in a row,
pause and resume on ``report_schedules``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # defaults given as strings: SQLite adds the columns in place instead of copying the tables
    with op.batch_alter_table('report_schedules', schema=None) as batch_op:
        batch_op.add_column(sa.Column('consecutive_failures', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('paused_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('paused_reason', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('resumed_at', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('report_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('attempts', sa.Integer(), server_default='1', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('report_runs', schema=None) as batch_op:
        batch_op.drop_column('attempts')
        batch_op.drop_column('heartbeat_at')
    with op.batch_alter_table('report_schedules', schema=None) as batch_op:
        batch_op.drop_column('resumed_at')
        batch_op.drop_column('paused_reason')
        batch_op.drop_column('paused_at')
        batch_op.drop_column('consecutive_failures')
