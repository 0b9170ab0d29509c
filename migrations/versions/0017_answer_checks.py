"""Answer checks of serving units (``answer_checks``): the answer, first-token time and decode speed, stored with
the host's snapshot of that moment.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'answer_checks',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('host_name', sa.String(length=128), nullable=False),
        sa.Column('unit', sa.String(length=256), nullable=False),
        sa.Column('snapshot_id', sa.Integer(), nullable=True),
        sa.Column('taken_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('outcome', sa.String(length=16), nullable=False),
        sa.Column('answer', sa.String(length=300), nullable=False),
        sa.Column('first_token_ms', sa.Integer(), nullable=True),
        sa.Column('tok_s', sa.Float(), nullable=True),
        sa.Column('tokens', sa.Integer(), nullable=True),
        sa.Column('model', sa.String(length=200), nullable=True),
        sa.Column('reason', sa.String(length=500), nullable=True),
        sa.Column('requested_by', sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(['snapshot_id'], ['snapshots.id'], name=op.f('fk_answer_checks_snapshot_id_snapshots'), ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_answer_checks')),
    )
    op.create_index('ix_answer_checks_host_unit', 'answer_checks', ['host_name', 'unit', 'id'], unique=False)
    op.create_index(op.f('ix_answer_checks_snapshot_id'), 'answer_checks', ['snapshot_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_answer_checks_snapshot_id'), table_name='answer_checks')
    op.drop_index('ix_answer_checks_host_unit', table_name='answer_checks')
    op.drop_table('answer_checks')
