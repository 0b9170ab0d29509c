"""A worker's progress row on SQLite carries its report's JSON made as the host answered, with the snapshot id
put in once its batch is written: the text is, to the byte, what the JSON column's own bind processor stores for
the report with that id (answered with readings, unreachable, a question asked, names out of ASCII)."""

import dataclasses
import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict
from bot.domain.workers.models import FleetRunHost
from bot.flows.workers.dispatch import _decode
from bot.flows.workers.job import _answered
from bot.flows.workers.report_json import IN_SNAPSHOT, dump, load
from bot.foundation.db.session import JSON_TEXT
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
    dialect = create_engine("sqlite://", **JSON_TEXT).dialect  # as every engine of gpubot's writes JSON
    column = FleetRunHost.__table__.c.report.type.dialect_impl(dialect).bind_processor(dialect)
    assert column is not None
    want = column(dump(dataclasses.replace(report, snapshot_id=snapshot_id), readings_in_snapshot=True))
    assert _answered(report).text(snapshot_id) == want


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: r.host)
def test_a_progress_row_without_its_readings_reads_back_with_its_snapshots(report: StatusReport):
    """The readings, 6 kB of a host's 6.4 kB report, are written once (in the snapshot): the row read with the
    snapshot's readings is the report as it was."""
    stored = dataclasses.replace(report, snapshot_id=907)
    doc = json.loads(_answered(report).text(907))
    assert doc["readings"] is None and doc.get(IN_SNAPSHOT, False) == (report.readings is not None)
    snapshot = report.readings.to_json() if report.readings is not None else None
    assert load(doc, snapshot) == stored
    assert load(dump(stored)) == stored  # a report with its own readings (a host whose snapshot was not stored)


def test_a_report_whose_snapshot_is_gone_reads_unknown_saying_so():
    doc = json.loads(_answered(REPORTS[0]).text(907))
    (report,) = _decode([("node174", doc, None)], AT)
    assert report.assessment.verdict is Verdict.UNKNOWN
    assert "its snapshot's (id 907), which was not found" in report.assessment.reasons[0].text
