"""Fan-outs as data (``fleet_runs``) and their per-host progress (``fleet_run_hosts``), written by
worker processes; on PostgreSQL also procrastinate's schema (its job queue, pinned version).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'fleet_runs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('title', sa.String(length=200), nullable=False),
        sa.Column('total', sa.Integer(), nullable=False),
        sa.Column('requested_by', sa.String(length=64), nullable=True),
        sa.Column('need_bytes', sa.Integer(), nullable=True),
        sa.Column('created_at', WHEN, nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_fleet_runs')),
    )
    op.create_table(
        'fleet_run_hosts',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('host_name', sa.String(length=128), nullable=False),
        sa.Column('snapshot_id', sa.Integer(), nullable=True),
        sa.Column('report', JSON, nullable=False),
        sa.Column('worker', sa.String(length=80), nullable=True),
        sa.ForeignKeyConstraint(['run_id'], ['fleet_runs.id'], name=op.f('fk_fleet_run_hosts_run_id_fleet_runs'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_fleet_run_hosts')),
        sa.UniqueConstraint('run_id', 'host_name', name='uq_fleet_run_hosts_host'),
    )
    op.create_index(op.f('ix_fleet_run_hosts_run_id'), 'fleet_run_hosts', ['run_id'], unique=False)
    if op.get_bind().dialect.name == 'postgresql':
        # The schema is many statements with function bodies: sent as one simple query through the
        # driver's own connection (asyncpg), inside the migration's transaction.
        from procrastinate.schema import SchemaManager
        from sqlalchemy.util import await_

        conn = op.get_bind().connection
        await_(conn.driver_connection.execute(SchemaManager.get_schema()))


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute(sa.text("DROP TABLE IF EXISTS procrastinate_events, procrastinate_periodic_defers, procrastinate_jobs, "
                           "procrastinate_workers CASCADE"))
        op.execute(sa.text(r"""DO $$ DECLARE r record; BEGIN
            FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p WHERE p.proname LIKE 'procrastinate\_%' LOOP
                EXECUTE 'DROP FUNCTION IF EXISTS ' || r.f || ' CASCADE';
            END LOOP;
            FOR r IN SELECT t.typname FROM pg_type t WHERE t.typname LIKE 'procrastinate\_%' AND t.typtype IN ('e', 'c') LOOP
                EXECUTE 'DROP TYPE IF EXISTS ' || quote_ident(r.typname) || ' CASCADE';
            END LOOP;
        END $$"""))
    op.drop_index(op.f('ix_fleet_run_hosts_run_id'), table_name='fleet_run_hosts')
    op.drop_table('fleet_run_hosts')
    op.drop_table('fleet_runs')
