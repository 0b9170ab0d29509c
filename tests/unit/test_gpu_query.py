"""The GPU query retried without fields the driver refuses, run by ``sh`` against the fake
``nvidia-smi`` (which refuses like the real one: exit 2, the first unknown field named on stdout)."""

from __future__ import annotations

import os
import subprocess

import pytest

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.nvidia_smi import gpu_query_command, parse_gpu_report
from bot.probing.probes.nvidia_smi_query import retry_query_command, unsupported_fields
from bot.probing.probes.readings import ProbeFailure
from tests.fixtures_h200 import captured
from tests.support import fakestate
from tests.support.fakestate import FAKEHOST_DIR

ADDR = "127.0.0.99"


def run(tmp_path, command: str, **state) -> ProbeOutput:
    fakestate.write_state(tmp_path, ADDR, **state)
    env = {
        "PATH": f"{FAKEHOST_DIR}:/usr/bin:/bin",
        "LC_ALL": "C",
        "GPUBOT_FAKE_ADDR": ADDR,
        "GPUBOT_FAKE_STATE_DIR": str(tmp_path),
        "GPUBOT_D": str(tmp_path),  # the batch's folder, where the GPU probe leaves the process list
    }
    res = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, env=env)
    return ProbeOutput("gpus", res.stdout, res.stderr, res.returncode)


def test_the_real_refusal_names_only_the_first_unknown_field():
    out = captured("badfield_two")
    assert out.exit_status == 2 and out.stdout.strip() == 'Field "not.a.field" is not a valid field to query.'


def test_a_driver_knowing_everything_answers_the_first_time(tmp_path):
    out = run(tmp_path, gpu_query_command(), gpus=2)
    assert out.exit_status == 0 and unsupported_fields(out.stdout) == []
    assert out.stdout.startswith("# fields: index,uuid,name,")
    assert "gpu_recovery_action,remapped_rows.pending" in out.stdout.splitlines()[0]


def test_each_refused_field_is_dropped_in_turn_and_recorded(tmp_path):
    refused = ["retired_pages.pending", "memory.reserved", "persistence_mode"]
    out = run(tmp_path, gpu_query_command(), gpus=2, unknown_fields=refused)
    assert out.exit_status == 0
    assert unsupported_fields(out.stdout) == ["memory.reserved", "retired_pages.pending", "persistence_mode"]
    report = parse_gpu_report(out, ProbeOutput("apps", "", "", 0))
    assert report.failure is None and len(report.gpus) == 2
    g = report.gpus[0]
    assert (
        g.memory_reserved_mib is None and g.health.retired_pages_pending is None and g.health.persistence_mode is None
    )
    assert g.health.recovery_action == "None" and g.memory_used_mib == 0


def test_the_older_slowdown_name_is_asked_for_when_the_newer_is_refused(tmp_path):
    out = run(
        tmp_path,
        gpu_query_command(),
        gpus=1,
        unknown_fields=["clocks_event_reasons.hw_slowdown"],
        gpu_overrides={0: {"clocks_event_reasons.hw_slowdown": "Active"}},
    )
    assert "clocks_throttle_reasons.hw_slowdown" in out.stdout.splitlines()[0]
    assert unsupported_fields(out.stdout) == ["clocks_event_reasons.hw_slowdown"]
    (g,) = parse_gpu_report(out, ProbeOutput("apps", "", "", 0)).gpus
    assert g.health.hw_slowdown is True


def test_a_refused_required_field_is_the_query_failure_not_a_retry(tmp_path):
    out = run(tmp_path, gpu_query_command(), gpus=1, unknown_fields=["uuid"])
    assert out.exit_status == 2
    report = parse_gpu_report(out, ProbeOutput("apps", "", "", 0))
    assert report.failure is ProbeFailure.FAILED
    assert report.message == 'nvidia-smi exited 2: Field "uuid" is not a valid field to query.'


def test_field_names_are_checked_before_they_reach_the_shell():
    with pytest.raises(ValueError):
        retry_query_command(["index", "uuid;reboot"], optional=[], fallbacks={})
    assert os.path.isfile(os.path.join(FAKEHOST_DIR, "nvidia-smi"))
