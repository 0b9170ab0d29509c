"""Report schedule ids are never reused on SQLite: ``report_schedules`` gets ``AUTOINCREMENT``.

Without it SQLite gives a new row the largest id plus one, so after ``report remove 2`` (the
newest) the next schedule was #2 again, and messages saying "report #2" named another schedule.
PostgreSQL's sequence never reuses an id, so nothing changes there. On SQLite the table is
rebuilt (batch mode: copy, drop, rename; rows and ids kept); the sequence starts at the largest id
kept. ``action_requests`` rows are never deleted, so their ids are not reused and stay as they are.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != 'sqlite':
        return
    # the migration connection has foreign keys off (SQLite's default), so dropping the old table
    # does not cascade into report_runs
    with op.batch_alter_table('report_schedules', recreate='always',
                              table_kwargs={'sqlite_autoincrement': autoincrement}):
        pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
