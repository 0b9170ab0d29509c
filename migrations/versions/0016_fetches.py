"""Downloads started by ``/gpu fetch`` (``fetches``): the detached process on the host, its progress as last
read, and the verified result.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None

JSONDOC = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')


def upgrade() -> None:
    op.create_table(
        'fetches',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('request_id', sa.Integer(), nullable=False),
        sa.Column('host', sa.String(length=128), nullable=False),
        sa.Column('repo', sa.String(length=200), nullable=False),
        sa.Column('commit', sa.String(length=64), nullable=False),
        sa.Column('target', sa.Text(), nullable=False),
        sa.Column('endpoint', sa.Text(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('pid', sa.Integer(), nullable=True),
        sa.Column('start', sa.String(length=32), nullable=True),
        sa.Column('files', JSONDOC, nullable=False),
        sa.Column('total_bytes', sa.BigInteger(), nullable=False),
        sa.Column('bytes_done', sa.BigInteger(), nullable=False),
        sa.Column('files_done', sa.Integer(), nullable=False),
        sa.Column('rate_bps', sa.Float(), nullable=True),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('polled_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('grew_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('channel', sa.String(length=32), nullable=True),
        sa.Column('thread_ts', sa.String(length=32), nullable=True),
        sa.Column('progress_ts', sa.String(length=32), nullable=True),
        sa.Column('message', sa.Text(), nullable=True),
        sa.Column('result', JSONDOC, nullable=True),
        sa.ForeignKeyConstraint(
            ['request_id'], ['action_requests.id'], name=op.f('fk_fetches_request_id_action_requests'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_fetches')),
    )
    with op.batch_alter_table('fetches', schema=None) as batch_op:
        batch_op.create_index('ix_fetches_host_state', ['host', 'state'], unique=False)
        batch_op.create_index(batch_op.f('ix_fetches_request_id'), ['request_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('fetches', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_fetches_request_id'))
        batch_op.drop_index('ix_fetches_host_state')
    op.drop_table('fetches')
