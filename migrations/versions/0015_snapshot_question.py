"""The asker's question beside the host's verdict (``snapshots.question``).

A ``status HOST need=SIZE`` used to be stored as the host's own state: a healthy host serving a
unit, asked whether it could take another model, was stored *not ready* ("the GPUs are serving …",
"…: 1.3 TB free, need 540 GB"), and history, the hourly roll-up, watches and reports read that. Now
the verdict and reasons of a snapshot are the host's as configured, and the question (what was
asked and its judgement) goes in ``question``.

This adds the column, and moves what the stored snapshots mixed: a row whose reasons came from a
``need=`` (codes ``gpus_serving``, ``disk_short``, ``disk_unknown``: none is written without one)
keeps its old verdict and reasons as its ``question``, and gets the host's own back: the disk
reasons of the question dropped, the serving unit's GPUs and unit state notes again, the verdict
from what remains (a blocker: *not ready*; an unknown: *unknown*; a serving unit: *serving*; else
*ready*). The affected hosts' ``verdict_changed`` flags and their hours' ``last_verdict`` are then
set from the rows as they now read. Running it again changes nothing (a moved row has no such
codes). Downgrade drops the column (the moved rows keep the host's verdict).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""
import re
from datetime import timezone

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

_ASKED = ('gpus_serving', 'disk_short', 'disk_unknown')
_SERVING = re.compile(r'^the GPUs are serving (?P<unit>\S+) \(healthy, (?P<on>[^)]*)\)')

_snapshots = sa.table(
    'snapshots',
    sa.column('id', sa.Integer),
    sa.column('host_name', sa.String),
    sa.column('taken_at', sa.DateTime(timezone=True)),
    sa.column('verdict', sa.String),
    sa.column('reasons', sa.JSON),
    sa.column('verdict_changed', sa.Boolean),
    sa.column('question', sa.JSON),
)
_hours = sa.table(
    'snapshot_hours',
    sa.column('host_name', sa.String),
    sa.column('epoch_hour', sa.Integer),
    sa.column('last_verdict', sa.String),
)


def host_part(verdict: str, reasons: list[dict]) -> tuple[str, list[dict]]:
    """The host's own verdict and reasons of a snapshot judged with ``need=``."""
    units = [m.group('unit') for r in reasons if r.get('code') == 'gpus_serving' and (m := _SERVING.match(r['text']))]
    out: list[dict] = []
    for r in reasons:
        code = r.get('code')
        if code in ('disk_short', 'disk_unknown'):
            continue
        if code == 'gpus_serving':
            m = _SERVING.match(r['text'])
            text = f"{m.group('unit')} is serving on {m.group('on')}" if m else r['text']
            out.append({'code': 'serving', 'text': text, 'severity': 'note'})
        elif code == 'gpu_serving':
            out.append({**r, 'severity': 'note'})
        elif code == 'unit_state' and (unit := next((u for u in units if r['text'].startswith(f'{u} is ')), None)):
            state = r['text'][len(unit) + 4:].split(',')[0]
            expected = r['text'].rsplit('expected ', 1)[-1]
            out.append({'code': 'unit_serving', 'text': f'{unit} is {state} (expected {expected}): it is serving',
                        'severity': 'note'})
        else:
            out.append(r)
    severities = {r.get('severity') for r in out}
    if verdict not in ('ready', 'not_ready', 'unknown', 'serving'):
        return verdict, out
    if 'blocker' in severities:
        return 'not_ready', out
    if 'unknown' in severities:
        return 'unknown', out
    return ('serving' if units else 'ready'), out


def _epoch_hour(when) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() // 3600)


def upgrade() -> None:
    op.add_column(
        'snapshots',
        sa.Column('question', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'),
                  nullable=True),
    )
    bind = op.get_bind()
    as_text = sa.cast(_snapshots.c.reasons, sa.Text)
    rows = bind.execute(
        sa.select(_snapshots.c.id, _snapshots.c.host_name, _snapshots.c.verdict, _snapshots.c.reasons)
        .where(sa.or_(*(as_text.like(f'%{code}%') for code in _ASKED)))
    ).all()
    hosts: set[str] = set()
    for id_, host, verdict, reasons in rows:
        if not any(r.get('code') in _ASKED for r in reasons or []):
            continue
        new_verdict, new_reasons = host_part(verdict, reasons)
        question = {'schema_version': 1, 'need_bytes': None, 'paths': [], 'verdict': verdict, 'serving': [],
                    'reasons': reasons}
        bind.execute(sa.update(_snapshots).where(_snapshots.c.id == id_)
                     .values(verdict=new_verdict, reasons=new_reasons, question=question))
        hosts.add(host)
    for host in sorted(hosts):
        _refresh(bind, host)


def _refresh(bind, host: str) -> None:
    """``verdict_changed`` and the hours' ``last_verdict`` of ``host`` from its rows as they now read."""
    prev = None
    last: dict[int, str] = {}
    flips: dict[bool, list[int]] = {True: [], False: []}
    for id_, at, verdict, changed in bind.execute(
        sa.select(_snapshots.c.id, _snapshots.c.taken_at, _snapshots.c.verdict, _snapshots.c.verdict_changed)
        .where(_snapshots.c.host_name == host).order_by(_snapshots.c.taken_at, _snapshots.c.id)
    ):
        flag = verdict != prev
        if bool(changed) != flag:
            flips[flag].append(id_)
        prev = verdict
        last[_epoch_hour(at)] = verdict
    for flag, ids in flips.items():
        for start in range(0, len(ids), 500):
            bind.execute(sa.update(_snapshots).where(_snapshots.c.id.in_(ids[start:start + 500]))
                         .values(verdict_changed=flag))
    for hour, verdict in last.items():
        bind.execute(sa.update(_hours).where(_hours.c.host_name == host, _hours.c.epoch_hour == hour)
                     .values(last_verdict=verdict))


def downgrade() -> None:
    with op.batch_alter_table('snapshots') as batch:
        batch.drop_column('question')
