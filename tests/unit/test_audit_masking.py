"""The plain-text audit (``gpubot audit``, ``/gpu audit``) masks secrets in what steps printed, as the
JSON form and the journal views do (a journal holds tokens; a failed start's step output
carries its tail)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bot.domain.actions.models import ActionRequest, ActionStep
from bot.flows.actions.audit import AuditEntry
from bot.words.render.audit_text import audit_text

STORED = Path(__file__).parents[1] / "fixtures" / "stored" / "action_request_pivot.json"
SECRETS = ["hf_abcdefghijklmnopqrstuvwxyz0123", "sk-proj-abcdefghijklmnopqrstuvwx", "xoxb-1234-5678-abcdefghijkl"]


def test_the_plain_text_audit_masks_secrets_in_step_output_summary_and_message():
    row = json.loads(STORED.read_text())
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    req = ActionRequest(
        id=7,
        kind="pivot",
        host="node174",
        spec=row["spec"],
        plan=row["plan"],
        state="failed",
        requester="U1",
        approvers=[],
        approvals_needed=1,
        created_at=at,
        updated_at=at,
        expires_at=at,
        message=f"start failed: HF_TOKEN={SECRETS[0]}",
        result=None,
        replaced_by=None,
    )
    step = ActionStep(
        request_id=7,
        idx=3,
        title="start b.service",
        command="systemctl start b.service",
        state="failed",
        exit_status=1,
        stdout=f"loading\nOPENAI_API_KEY={SECRETS[1]}\n",
        stderr=f"Authorization: Bearer {SECRETS[2]}\n",
        summary=f"token={SECRETS[0]}",
        started_at=at,
        finished_at=at,
    )
    text = audit_text([AuditEntry(req, [], [step])], host="node174")
    assert "step 3 failed: start b.service" in text and "| loading" in text
    for secret in SECRETS:
        assert secret not in text
    assert text.count("[redacted]") >= 4
