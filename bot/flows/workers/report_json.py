"""A :class:`~bot.flows.status.host.StatusReport` as JSON and back (pure): how a worker's per-host
result reaches the process that renders it (``fleet_run_hosts.report``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict, assessment_doc, assessment_of
from bot.probing.probes.readings import Readings

VERSION = 1


IN_SNAPSHOT = "readings_in_snapshot"
"""The key of a report whose readings are its snapshot's (``snapshots.readings`` of its ``snapshot_id``), not its
own: what a worker writes beside the snapshot in one transaction, where a second copy would double what the
transaction writes (SQLite: while it holds the database's one write lock)."""


def dump(report: StatusReport, *, readings_in_snapshot: bool = False) -> dict[str, Any]:
    """``report`` as a JSON-ready dict (times ISO 8601 with offset, readings as
    :meth:`~bot.probing.probes.readings.Readings.to_json`), ``v`` its shape's version. ``readings_in_snapshot``:
    the readings left out, read back from the snapshot the report is stored with (:data:`IN_SNAPSHOT`)."""
    a = report.assessment
    if readings_in_snapshot and report.readings is not None:
        return {**dump(replace(report, readings=None)), IN_SNAPSHOT: True}
    return {
        "v": VERSION,
        "host": report.host,
        "where": report.where,
        "snapshot_id": report.snapshot_id,
        "taken_at": report.taken_at.isoformat(),
        "duration_ms": report.duration_ms,
        "verdict": a.verdict.value,
        "serving": list(a.serving),
        "reasons": [{"code": r.code, "text": r.text, "severity": r.severity.value} for r in a.reasons],
        "readings": report.readings.to_json() if report.readings is not None else None,
        "error": report.error,
        "need_bytes": report.need_bytes,
        "units_expected": dict(report.units_expected),
        "store_error": report.store_error,
        "question": assessment_doc(report.question) if report.question is not None else None,
        "paths": list(report.paths),
    }


def load(data: dict[str, Any], snapshot_readings: dict[str, Any] | None = None) -> StatusReport:
    """Inverse of :func:`dump` (``snapshot_readings``: its snapshot's readings JSON, for a report written without its
    own); raises ``ValueError``/``KeyError`` for a dict of another shape, or for one whose readings are its
    snapshot's when none is given."""
    if data.get(IN_SNAPSHOT):
        if snapshot_readings is None:
            raise ValueError(f"its readings are its snapshot's (id {data.get('snapshot_id')}), which was not found")
        data = {**data, "readings": snapshot_readings}
    assessment = Assessment(
        Verdict(data["verdict"]),
        [Reason(r["code"], r["text"], Severity(r["severity"])) for r in data["reasons"]],
        tuple(data.get("serving") or ()),
    )
    readings = Readings.from_json(data["readings"]) if data.get("readings") is not None else None
    return StatusReport(
        data["host"],
        data["where"],
        data["snapshot_id"],
        datetime.fromisoformat(data["taken_at"]),
        int(data["duration_ms"]),
        assessment,
        readings,
        data.get("error"),
        data.get("need_bytes"),
        dict(data.get("units_expected") or {}),
        data.get("store_error"),
        assessment_of(data["question"]) if data.get("question") else None,
        tuple(data.get("paths") or ()),
    )
