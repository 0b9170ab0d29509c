"""Approval-gated actions: requests, approvals, executed steps.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

A branch beside 0004 (both from 0002); the app upgrades to "heads".
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

JSONDOC = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')


def upgrade() -> None:
    op.create_table('action_requests',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('host', sa.String(length=128), nullable=False),
    sa.Column('host_group', sa.String(length=64), nullable=True),
    sa.Column('spec', JSONDOC, nullable=False),
    sa.Column('plan', JSONDOC, nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('requester', sa.String(length=32), nullable=False),
    sa.Column('approvers', JSONDOC, nullable=False),
    sa.Column('approvals_needed', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('channel', sa.String(length=32), nullable=True),
    sa.Column('message_ts', sa.String(length=32), nullable=True),
    sa.Column('before_snapshot_id', sa.Integer(), nullable=True),
    sa.Column('after_snapshot_id', sa.Integer(), nullable=True),
    sa.Column('executor', sa.String(length=64), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('result', JSONDOC, nullable=True),
    sa.Column('replaced_by', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['after_snapshot_id'], ['snapshots.id'], name=op.f('fk_action_requests_after_snapshot_id_snapshots'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['before_snapshot_id'], ['snapshots.id'], name=op.f('fk_action_requests_before_snapshot_id_snapshots'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_action_requests'))
    )
    with op.batch_alter_table('action_requests', schema=None) as batch_op:
        batch_op.create_index('ix_action_requests_host_created', ['host', 'created_at'], unique=False)
        batch_op.create_index('ix_action_requests_state', ['state'], unique=False)

    op.create_table('action_steps',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('request_id', sa.Integer(), nullable=False),
    sa.Column('idx', sa.Integer(), nullable=False),
    sa.Column('title', sa.Text(), nullable=False),
    sa.Column('command', sa.Text(), nullable=True),
    sa.Column('script', sa.Text(), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('exit_status', sa.Integer(), nullable=True),
    sa.Column('stdout', sa.Text(), nullable=True),
    sa.Column('stderr', sa.Text(), nullable=True),
    sa.Column('summary', sa.Text(), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['request_id'], ['action_requests.id'], name=op.f('fk_action_steps_request_id_action_requests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_action_steps')),
    sa.UniqueConstraint('request_id', 'idx', name='uq_action_steps_request_idx')
    )
    with op.batch_alter_table('action_steps', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_action_steps_request_id'), ['request_id'], unique=False)

    op.create_table('approvals',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('request_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.String(length=32), nullable=False),
    sa.Column('decision', sa.String(length=8), nullable=False),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['request_id'], ['action_requests.id'], name=op.f('fk_approvals_request_id_action_requests'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_approvals')),
    sa.UniqueConstraint('request_id', 'user_id', name='uq_approvals_request_user')
    )


def downgrade() -> None:
    op.drop_table('approvals')
    with op.batch_alter_table('action_steps', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_action_steps_request_id'))

    op.drop_table('action_steps')
    with op.batch_alter_table('action_requests', schema=None) as batch_op:
        batch_op.drop_index('ix_action_requests_state')
        batch_op.drop_index('ix_action_requests_host_created')

    op.drop_table('action_requests')
