"""`as NAME` in `gpubot console` never gives more than the console's own role, and a name typed there
never meets an approval rule that names people: the console proves no one's
identity, so a Slack id typed after `as` counts for no more than `--role` says."""

import json
import os
import re
import sys

import pytest

from tests.e2e.test_console import _first_run_env
from tests.support.terminal import Terminal

pytestmark = pytest.mark.process  # every test runs gpubot console in a terminal


def test_a_viewer_acting_as_an_admin_stays_a_viewer(tmp_path):
    env = {**_first_run_env(tmp_path), "GPUBOT_ADMINS": '["U0ADMIN"]', "GPUBOT_OPERATORS": '["U0OPS"]'}
    term = Terminal([sys.executable, "-m", "bot", "console", "--role", "viewer"], env)
    term.read_until("gpubot> ")
    term.type("as U0ADMIN")
    assert "now acting as U0ADMIN (viewer)" in term.read_until("gpubot> ")
    term.type("hosts add node9 127.0.0.9")  # admins only
    refused = term.read_until("gpubot> ")
    assert "`hosts add` is not open to you (needs the admin role)" in refused and "Added" not in refused, refused
    demo = tmp_path / "data" / "gpubot" / "demo" / "old-model"
    term.type(f"clean localhost weights={demo}")  # operators and admins only
    refused = term.read_until("gpubot> ")
    assert "clean is not open to you (needs the operator role)" in refused and "Approval needed" not in refused, refused
    term.type("as U0OPS")
    assert "now acting as U0OPS (viewer)" in term.read_until("gpubot> ")
    term.type("hosts")
    assert "node9" not in term.read_until("gpubot> ")
    term.type("quit")
    assert term.close() == 0
    assert demo.exists()


def test_a_rule_naming_approvers_is_met_by_no_name_typed_in_the_console(tmp_path):
    policy = [{"kinds": ["clean"], "approvers": ["U0ALICE", "S0GPUOPS"]}]
    env = {**_first_run_env(tmp_path), "GPUBOT_APPROVAL_POLICY": json.dumps(policy), "GPUBOT_ADMINS": '["U0ALICE"]'}
    term = Terminal([sys.executable, "-m", "bot", "console", "--role", "admin"], env)
    term.read_until("gpubot> ")
    demo = tmp_path / "data" / "gpubot" / "demo" / "old-model"
    term.type(f"clean localhost weights={demo}")
    card = term.read_until("gpubot> ")
    approve = re.search(r"\[(\d+)\] Approve", card)
    assert approve and "approvers: @U0ALICE" in card, card
    for name in ("U0ALICE", "alice"):
        term.type(f"as {name}")
        term.read_until("gpubot> ")
        term.type(approve.group(1))
        term.read_until(r"\[y/N\] ")
        term.type("y")
        answer = term.read_until("gpubot> ")
        assert "a name typed in the console proves no one's identity" in answer and "Done" not in answer, (name, answer)
    term.type("audit")
    audit = term.read_until("gpubot> ")
    assert "PENDING" in audit and "approved by" not in audit, audit
    term.type("quit")
    assert term.close() == 0
    assert demo.exists() and os.listdir(demo)
