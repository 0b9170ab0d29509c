"""A fetch as a transient systemd unit: its name, the exact ``systemd-run`` argv, and ``systemctl show`` read
back, over texts as systemd prints them (service properties first, then the unit's)."""

from __future__ import annotations

import pytest

from bot.flows.actions import fetch_unit as fu

TARGET = "/shared/models/Kimi K2.5 (NVFP4)"

# systemctl show -p LoadState,ActiveState,SubState,Result,MainPID,ExecMainPID,ExecMainCode,ExecMainStatus UNIT
ACTIVE = """Result=success
MainPID=48213
ExecMainPID=48213
ExecMainCode=0
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=running
"""
EXITED_SUCCESS = """Result=success
MainPID=0
ExecMainPID=48213
ExecMainCode=1
ExecMainStatus=0
LoadState=loaded
ActiveState=inactive
SubState=dead
"""
FAILED_EXIT_1 = """Result=exit-code
MainPID=0
ExecMainPID=48213
ExecMainCode=1
ExecMainStatus=1
LoadState=loaded
ActiveState=failed
SubState=failed
"""
KILLED = """Result=signal
MainPID=0
ExecMainPID=48213
ExecMainCode=2
ExecMainStatus=9
LoadState=loaded
ActiveState=failed
SubState=failed
"""
NOT_FOUND = """Result=success
MainPID=0
ExecMainPID=0
ExecMainCode=0
ExecMainStatus=0
LoadState=not-found
ActiveState=inactive
SubState=dead
"""


def test_the_unit_is_named_after_the_folder_and_only_such_names_are_fetch_units():
    name = fu.unit_name(TARGET)
    assert name == fu.unit_name(TARGET) != fu.unit_name(TARGET + "/")
    assert name.startswith("gpubot-fetch-") and name.endswith(".service") and len(name) == len("gpubot-fetch-") + 24
    assert fu.is_fetch_unit(name)
    for other in ("sshd.service", "gpubot-fetch-x.service", f"{name}\n", "gpubot-fetch-0123456789abcdef.service;x"):
        assert not fu.is_fetch_unit(other)
        with pytest.raises(ValueError):
            fu.stop_argv(other)
    assert fu.stop_argv(name) == ["systemctl", "stop", "--", name]
    assert fu.show_argv(name, user=True) == [
        "systemctl",
        "--user",
        "show",
        "-p",
        "LoadState,ActiveState,SubState,Result,MainPID,ExecMainPID,ExecMainCode,ExecMainStatus",
        "--",
        name,
    ]


def test_systemd_run_runs_the_client_as_the_folders_owner_in_a_collected_unit():
    launch = fu.UnitLaunch(
        hf="/opt/hf/bin/hf",
        target=TARGET,
        state=f"{TARGET}/.cache/gpubot-fetch",
        repo="org/Kimi",
        commit="a" * 40,
        endpoint="https://hub.example",
        include=("*.json", "model-*.safetensors"),
        uid=1001,
        gid=1001,
    )
    argv = fu.systemd_run_argv(launch)
    assert argv[: argv.index("--")] == [
        "systemd-run",
        f"--unit={fu.unit_name(TARGET)}",
        f"--description=gpubot fetch org/Kimi into {TARGET}",
        "--collect",
        "--quiet",
        "--uid=1001",
        "--gid=1001",
        f"--property=WorkingDirectory={TARGET}/.cache/gpubot-fetch",
        "--property=KillMode=control-group",
        "--property=TimeoutStopSec=10",
        "--property=UMask=0022",
        "--property=NoNewPrivileges=yes",
        "--setenv=HF_ENDPOINT=https://hub.example",
        "--setenv=HF_HUB_DISABLE_TELEMETRY=1",
    ]
    assert argv[argv.index("--") + 1 :] == [
        "/bin/sh",
        "-c",
        fu.WRAPPER,
        "fetch",
        "/opt/hf/bin/hf",
        f"{TARGET}/.cache/gpubot-fetch",
        "org/Kimi",
        "--revision",
        "a" * 40,
        "--local-dir",
        TARGET,
        "--include",
        "*.json",
        "--include",
        "model-*.safetensors",
    ]
    mine = fu.systemd_run_argv(
        fu.UnitLaunch("/opt/hf/bin/hf", TARGET, "/s", "org/Kimi", "a" * 40, "https://h", user=True)
    )
    assert mine[:2] == ["systemd-run", "--user"] and not [a for a in mine if a.startswith(("--uid", "--gid"))]
    with pytest.raises(ValueError):
        fu.systemd_run_argv(fu.UnitLaunch("/h", TARGET, "/s", "o/r", "a" * 40, "https://h"))  # neither
    with pytest.raises(ValueError):
        fu.systemd_run_argv(fu.UnitLaunch("/h", TARGET, "/s", "o/r", "a" * 40, "https://h", uid=0, user=True))


def test_systemctl_show_says_running_ended_failed_killed_or_gone():
    running = fu.parse_show(ACTIVE)
    assert (running.found, running.alive, running.pid, running.rc) == (True, True, 48213, None)
    assert running.words() == "active (running), pid 48213"
    done = fu.parse_show(EXITED_SUCCESS)
    assert (done.alive, done.rc, done.result, done.pid) == (False, 0, "success", None)
    assert done.words() == "inactive (dead)"
    failed = fu.parse_show(FAILED_EXIT_1)
    assert (failed.alive, failed.rc, failed.signal) == (False, 1, None)
    assert failed.words() == "failed (exit-code 1)"
    killed = fu.parse_show(KILLED)
    assert (killed.rc, killed.signal, killed.words()) == (None, 9, "failed (killed by signal 9)")
    gone = fu.parse_show(NOT_FOUND)
    assert (gone.found, gone.alive, gone.rc) == (False, False, None)  # collected: the rc file says how it ended
    assert gone.words() == "not loaded (ended and collected)"
    assert fu.parse_show("") == fu.parse_show("garbage\n")
    assert not fu.parse_show("").found


def test_the_unit_runs_the_same_wrapper_as_the_detached_process():
    from importlib.resources import files

    helper = files("bot.domain.privilege").joinpath("gpubot-priv.sh").read_text()
    assert f"setsid nohup sh -c '{fu.WRAPPER}'" in helper  # one story in the state folder, either way


def test_a_transient_unit_needs_systemd_as_pid_1_and_systemd_run():
    assert fu.systemd_here(["pid1=systemd", "systemd_run=yes"])
    assert not fu.systemd_here(["pid1=sshd", "systemd_run=yes"])  # a container whose PID 1 is the service
    assert not fu.systemd_here(["pid1=systemd", "systemd_run=no"])
    assert not fu.systemd_here([])
