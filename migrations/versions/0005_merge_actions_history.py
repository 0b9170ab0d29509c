"""Join the two branches made in parallel: actions (0003) and history/reports (0004).

Revision ID: 0005
Revises: 0003, 0004
Create Date: 2026-11-29
"""

revision = "0005"
down_revision = ("0003", "0004")
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
