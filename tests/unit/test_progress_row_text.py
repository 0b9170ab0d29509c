"""A worker's progress row on SQLite carries its report's JSON made as the host answered, with the snapshot id
put in once its batch is written: the text is, to the byte, what the JSON column's own bind processor stores for
the report with that id (answered with readings, unreachable, a question asked, names out of ASCII)."""

import dataclasses
from datetime import UTC, datetime

import pytest
from sqlalchemy.dialects import sqlite

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict
from bot.domain.workers.models import FleetRunHost
from bot.flows.workers.job import _answered
from bot.flows.workers.report_json import dump
from bot.probing.probes.readings import Disk, Gpu, GpuReport, HostContext, Readings

AT = datetime(2026, 3, 1, 9, 58, 30, 250000, tzinfo=UTC)
READINGS = Readings(
    gpu=GpuReport([Gpu(0, "GPU-1", "NVIDIA H200", 143771, 1200, 0, 3, 30, 70.5, None)]),
    disks=[Disk("/shared", avail_bytes=10**12)],
    folders=[],
    hf_cache=None,
    units=[],
    context=HostContext(),
)
REPORTS = [
    StatusReport("node174", "10.0.0.174", None, AT, 412, Assessment(Verdict.READY, []), READINGS),
    StatusReport(
        "nœud-2",
        "10.0.0.2",
        None,
        AT,
        3000,
        Assessment(Verdict.UNREACHABLE, [Reason("timeout", "keine Antwort «»", Severity.UNKNOWN)]),
        None,
        error="timed out",
    ),
    StatusReport(
        "node9",
        "10.0.0.9",
        None,
        AT,
        500,
        Assessment(Verdict.READY, []),
        READINGS,
        need_bytes=10**9,
        units_expected={"vllm.service": "inactive"},
        question=Assessment(Verdict.NOT_READY, [Reason("disk", "needs 1 GB", Severity.BLOCKER)]),
        paths=("/shared/m",),
    ),
]


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: r.host)
@pytest.mark.parametrize("snapshot_id", [1, 907, 10**12])
def test_the_progress_text_is_what_the_json_column_stores(report: StatusReport, snapshot_id: int):
    dialect = sqlite.dialect()
    column = FleetRunHost.__table__.c.report.type.dialect_impl(dialect).bind_processor(dialect)
    assert column is not None
    want = column(dump(dataclasses.replace(report, snapshot_id=snapshot_id)))
    assert _answered(report).text(snapshot_id) == want
