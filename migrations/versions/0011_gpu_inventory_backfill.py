"""Backfill the GPU inventory (``gpu_inventory``) from the snapshots already stored.

0008 created the inventory empty, so on a database written before it a GPU that vanished after the
upgrade was never counted missing: the host read *ready* where a database made by the current
code says *not ready* ("7 of 8 GPUs present"). This fills the inventory from the GPU UUIDs in
``snapshots.readings`` (``gpu.gpus[].uuid``, any stored shape: every one has them) of the
snapshots taken within ``GPUBOT_GPU_INVENTORY_DAYS`` (the window the verdict reads), skipping
snapshots whose GPU probe failed, as :func:`bot.domain.snapshots.inventory.record_rows` does for new ones.

Per GPU: first and last time seen in that window, and index, bus id, name and snapshot id of its
last sighting. The work is one ``INSERT … SELECT`` in the database (its JSON functions and a window
function), not rows through Python. Rows already there (probes made after 0008) are merged:
``first_seen`` becomes the earlier one, the other fields the later sighting's. Running it again
changes nothing. Downgrade leaves the rows (0008's downgrade drops the table).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from alembic import context, op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

_SIGHTINGS = {
    'sqlite': """
        SELECT s.id, s.host_name, s.taken_at, json_extract(g.value, '$.uuid') AS uuid,
               json_extract(g.value, '$.index') AS gpu_index, json_extract(g.value, '$.pci_bus_id') AS bus_id,
               json_extract(g.value, '$.name') AS name
        FROM snapshots AS s, json_each(s.readings, '$.gpu.gpus') AS g
        WHERE s.taken_at >= :since AND json_type(s.readings, '$.gpu') = 'object'
          AND json_extract(s.readings, '$.gpu.failure') IS NULL""",
    'postgresql': """
        SELECT s.id, s.host_name, s.taken_at, g ->> 'uuid' AS uuid,
               (g ->> 'index')::integer AS gpu_index, g ->> 'pci_bus_id' AS bus_id, g ->> 'name' AS name
        FROM snapshots AS s,
             jsonb_array_elements(CASE WHEN jsonb_typeof(s.readings -> 'gpu' -> 'gpus') = 'array'
                                       THEN s.readings -> 'gpu' -> 'gpus' ELSE '[]'::jsonb END) AS g
        WHERE s.taken_at >= :since AND (s.readings -> 'gpu' ->> 'failure') IS NULL""",
}

_BACKFILL = """
    INSERT INTO gpu_inventory (host_name, uuid, gpu_index, bus_id, name, first_seen, last_seen, last_snapshot_id)
    SELECT host_name, uuid, gpu_index, bus_id, name, first_seen, taken_at, id FROM (
        SELECT sighting.*,
               min(taken_at) OVER (PARTITION BY host_name, uuid) AS first_seen,
               row_number() OVER (PARTITION BY host_name, uuid ORDER BY taken_at DESC, id DESC) AS latest
        FROM ({sightings}) AS sighting
        WHERE uuid IS NOT NULL AND uuid != ''
    ) AS ranked
    WHERE latest = 1
    ON CONFLICT (host_name, uuid) DO UPDATE SET
        gpu_index = CASE WHEN excluded.last_seen > gpu_inventory.last_seen THEN excluded.gpu_index ELSE gpu_inventory.gpu_index END,
        bus_id = CASE WHEN excluded.last_seen > gpu_inventory.last_seen THEN excluded.bus_id ELSE gpu_inventory.bus_id END,
        name = CASE WHEN excluded.last_seen > gpu_inventory.last_seen THEN excluded.name ELSE gpu_inventory.name END,
        last_snapshot_id = CASE WHEN excluded.last_seen > gpu_inventory.last_seen
                                THEN excluded.last_snapshot_id ELSE gpu_inventory.last_snapshot_id END,
        last_seen = CASE WHEN excluded.last_seen > gpu_inventory.last_seen THEN excluded.last_seen ELSE gpu_inventory.last_seen END,
        first_seen = CASE WHEN excluded.first_seen < gpu_inventory.first_seen THEN excluded.first_seen ELSE gpu_inventory.first_seen END
"""


def inventory_days() -> int:
    """``GPUBOT_GPU_INVENTORY_DAYS``: from the Alembic config's attributes (tests), else gpubot's settings."""
    days = context.config.attributes.get('gpu_inventory_days')
    if days is None:
        from bot.foundation.config import Settings

        days = Settings().probes.gpu_inventory_days
    return int(days)


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    if dialect not in _SIGHTINGS:
        return
    since = datetime.now(timezone.utc) - timedelta(days=inventory_days())
    if dialect == 'sqlite':  # stored naive in UTC, as bot.foundation.db.base.UTCDateTime writes it
        since = since.replace(tzinfo=None)
    stmt = sa.text(_BACKFILL.format(sightings=_SIGHTINGS[dialect])).bindparams(
        sa.bindparam('since', since, type_=sa.DateTime(timezone=dialect != 'sqlite')))
    bind.execute(stmt)


def downgrade() -> None:
    pass
