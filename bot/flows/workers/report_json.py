"""A :class:`~bot.flows.status.host.StatusReport` as JSON and back (pure): how a worker's per-host
result reaches the process that renders it (``fleet_run_hosts.report``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict, assessment_doc, assessment_of
from bot.probing.probes.readings import Readings

VERSION = 1


def dump(report: StatusReport) -> dict[str, Any]:
    """``report`` as a JSON-ready dict (times ISO 8601 with offset, readings as
    :meth:`~bot.probing.probes.readings.Readings.to_json`), ``v`` its shape's version."""
    a = report.assessment
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


def load(data: dict[str, Any]) -> StatusReport:
    """Inverse of :func:`dump`; raises ``ValueError``/``KeyError`` for a dict of another shape."""
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
