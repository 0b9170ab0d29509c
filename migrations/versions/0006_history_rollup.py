"""History over long windows: ``snapshots.verdict_changed`` with the partial index
``ix_snapshots_changes``, and the hourly roll-up ``snapshot_hours``; both backfilled from the
snapshots already stored (see docs/benchmarks.md).

From here on :mod:`bot.domain.snapshots.service` keeps both up to date as it writes. The backfill is
plain SQL that SQLite (>= 3.25, window functions) and PostgreSQL both run:

* ``verdict_changed`` is true where ``LAG(verdict)`` over the host's snapshots (by ``taken_at``,
  then ``id``) is missing or different;
* one ``snapshot_hours`` row per host and UTC hour with at least one snapshot, keyed by
  ``epoch_hour`` (whole hours since 1970-01-01 UTC), as the writer computes it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def _hour(dialect: str) -> str:
    """SQL for ``taken_at``'s hour as whole hours since 1970-01-01 UTC (SQLite stores UTC text)."""
    if dialect == "sqlite":
        return "CAST(strftime('%s', taken_at) AS INTEGER) / 3600"
    return "CAST(floor(extract(epoch FROM taken_at) / 3600) AS INTEGER)"


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    changed = sa.text('verdict_changed = 1') if dialect == 'sqlite' else sa.text('verdict_changed = true')
    # a default given as a string, not an expression: SQLite then adds the column in place
    # (ALTER TABLE ADD COLUMN) instead of copying the whole table in batch mode
    false = '0' if dialect == 'sqlite' else 'false'
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.add_column(sa.Column('verdict_changed', sa.Boolean(), server_default=false, nullable=False))
    op.execute(
        "UPDATE snapshots SET verdict_changed = " + ("1" if dialect == "sqlite" else "true") + " WHERE id IN ("
        " SELECT id FROM (SELECT id, verdict, LAG(verdict) OVER (PARTITION BY host_name ORDER BY taken_at, id) AS prev"
        " FROM snapshots) s WHERE prev IS NULL OR prev <> verdict)"
    )
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.create_index('ix_snapshots_changes',
                              ['host_name', 'taken_at', 'id', 'verdict', 'gpu_used_mib', 'disk_free_bytes', 'verdict_changed'],
                              unique=False,
                              sqlite_where=changed, postgresql_where=changed)

    op.create_table('snapshot_hours',
    sa.Column('host_name', sa.String(length=128), nullable=False),
    sa.Column('epoch_hour', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('snapshot_count', sa.Integer(), nullable=False),
    sa.Column('gpu_used_mib_max', sa.BigInteger(), nullable=True),
    sa.Column('disk_free_bytes_min', sa.BigInteger(), nullable=True),
    sa.Column('first_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_verdict', sa.String(length=16), nullable=False),
    sa.PrimaryKeyConstraint('host_name', 'epoch_hour', name=op.f('pk_snapshot_hours')),
    sqlite_with_rowid=False,
    )
    hour = _hour(dialect)
    op.execute(
        "INSERT INTO snapshot_hours (host_name, epoch_hour, snapshot_count, gpu_used_mib_max, disk_free_bytes_min,"
        " first_at, last_at, last_verdict)"
        " SELECT host_name, hour, count(*), max(gpu_used_mib), min(disk_free_bytes), min(taken_at), max(taken_at),"
        " max(CASE WHEN rn = 1 THEN verdict END)"
        f" FROM (SELECT host_name, {hour} AS hour, taken_at, gpu_used_mib, disk_free_bytes, verdict,"
        f" row_number() OVER (PARTITION BY host_name, {hour} ORDER BY taken_at DESC, id DESC) AS rn FROM snapshots) s"
        " GROUP BY host_name, hour"
    )


def downgrade() -> None:
    op.drop_table('snapshot_hours')
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.drop_index('ix_snapshots_changes')
        batch_op.drop_column('verdict_changed')
