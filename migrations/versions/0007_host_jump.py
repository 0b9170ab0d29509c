"""Jump hosts: ``hosts.jump`` (``[user@]bastion[:port]``, NULL = direct or ssh_config's ProxyJump).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("jump", sa.String(length=400), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("jump")
