"""The pure parts of the health wait: default URLs, ExecStart argv, one look's verdict, journal answers."""

from bot.flows.actions.journal import parse_journal
from bot.flows.actions.unit_up import HealthCheck, UnitLook, default_url, exec_argv, judge, parse_look, timed_out
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import Gpu, GpuProcess, GpuReport, ProbeFailure


def test_well_known_servers_get_their_default_health_url():
    assert default_url(["/usr/bin/vllm", "serve", "/models/glm", "--port", "8001"]) == (
        "http://127.0.0.1:8001/health",
        "vLLM default, port from its command line",
    )
    assert default_url(["/opt/venv/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--host", "0.0.0.0"]) == (
        "http://127.0.0.1:8000/health",
        "vLLM default, its default port 8000",
    )
    assert (
        default_url(["python", "-m", "sglang.launch_server", "--port=30001", "--host", "10.0.0.5"])[0]
        == "http://10.0.0.5:30001/health"
    )
    assert default_url(["llama-server", "-m", "x.gguf", "--host", "::1"])[0] == "http://[::1]:8080/health"
    assert default_url(["/usr/bin/python3", "train.py", "--port", "8000"]) is None
    assert default_url(["vllm", "serve", "m", "--port", "80; rm -rf /"]) is None
    assert default_url(["vllm", "serve", "m", "--host", "$(reboot)"]) is None


def test_exec_start_as_systemctl_shows_it():
    shown = (
        "{ path=/usr/bin/vllm ; argv[]=/usr/bin/vllm serve /models/glm --port 8000 ; ignore_errors=no ; "
        "start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
    )
    assert exec_argv(shown) == ["/usr/bin/vllm", "serve", "/models/glm", "--port", "8000"]
    assert exec_argv("") == []


def gpus(*held: tuple[int, int, int]) -> GpuReport:
    """Four GPUs; ``held``: (gpu index, pid, MiB)."""
    return GpuReport(
        gpus=[Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, 0, 616, 0, 30, 100.0, "Disabled") for i in range(4)],
        processes=[GpuProcess(f"GPU-{g}", pid, mib, "python3") for g, pid, mib in held],
    )


def look(**kw) -> UnitLook:
    base = dict(
        active_state="active",
        sub_state="running",
        result="success",
        main_pid=42,
        main_alive=True,
        pids=frozenset({42, 43}),
        cuda_devices=(),
        argv=[],
        gpu=gpus((0, 42, 1000), (1, 43, 2000), (2, 99, 5)),
        health_code=200,
        health_status=0,
    )
    base.update(kw)
    return UnitLook(**base)


CHECK = HealthCheck("http://127.0.0.1:8000/health", "x", True, 60.0)


def verdict(lk: UnitLook, first_pid=42, check=CHECK):
    return judge(
        lk, host="h", unit="u.service", check=check, url=check.url, first_pid=first_pid, elapsed_s=3.0, http_timeout_s=5
    )


def test_up_needs_every_condition():
    up = verdict(look())
    assert up.phase == "up" and up.gpu_mib == {0: 1000, 1: 2000} and up.health == "200 OK"  # pid 99 is not the unit's
    assert verdict(look(health_code=503)).reason == "http://127.0.0.1:8000/health: HTTP 503"
    assert verdict(look(health_code=None, health_status=28)).reason.endswith("no answer within 5 s")
    assert verdict(look(gpu=gpus((2, 99, 5)))).reason == "no GPU memory held by its processes yet"
    assert verdict(look(cuda_devices=("0", "GPU-3"))).reason == "no GPU memory held yet on GPU 3"
    unknown = verdict(look(gpu=GpuReport(message="driver gone", failure=ProbeFailure.DRIVER)))
    assert unknown.phase == "waiting" and "GPU memory unknown (driver gone)" in unknown.reason
    assert verdict(look(gpu=gpus()), check=HealthCheck(None, "", False, 60.0)).phase == "up"
    assert verdict(look(active_state="activating", sub_state="start")).phase == "waiting"


def test_a_dead_or_replaced_main_process_fails_at_once():
    assert (
        verdict(look(active_state="failed", result="exit-code")).reason
        == "u.service is failed, result exit-code — its main process exited"
    )
    assert "restarting it (auto-restart)" in verdict(look(active_state="activating", sub_state="auto-restart")).reason
    assert verdict(look(main_pid=77)).reason == "main process 42 exited; systemd started another (77)"
    assert verdict(look(main_alive=False)).reason == "main process 42 is gone"
    assert "curl is not installed on h" in verdict(look(health_code=None, health_status=127)).reason
    assert verdict(look(main_pid=0), first_pid=None).phase == "failed"


def test_the_limit_names_the_setting_and_what_was_missing():
    last = verdict(look(health_code=None, health_status=7, health_error="curl: (7) Failed to connect"))
    out = timed_out(last, "GPUBOT_UNIT_HEALTH_WAIT_S")
    assert out.phase == "failed" and out.reason == (
        "not up within 1 min (the limit, GPUBOT_UNIT_HEALTH_WAIT_S); still "
        "http://127.0.0.1:8000/health: no answer (curl: (7) Failed to connect)"
    )


def test_one_look_is_parsed_from_its_frames():
    unit = ProbeOutput(
        "unit",
        "ActiveState=active\nSubState=running\nResult=success\nMainPID=42\nMainState=S\nCuda=0,1\n"
        "PidsFrom=tree\nPids=42 43 44\nCmd=" + b"vllm\0serve\0m\0".hex() + "\n",
        "",
        0,
    )
    lk = parse_look({"unit": unit, "health": ProbeOutput("health", "000", "curl: (7) Failed to connect\n", 7)}, None)
    assert (lk.main_pid, lk.main_alive, lk.pids, lk.cuda_devices, lk.argv) == (
        42,
        True,
        frozenset({42, 43, 44}),
        ("0", "1"),
        ["vllm", "serve", "m"],
    )
    assert (lk.health_code, lk.health_status, lk.health_error) == (None, 7, "curl: (7) Failed to connect")
    zombie = parse_look({"unit": ProbeOutput("unit", "ActiveState=active\nMainPID=42\nMainState=Z\n", "", 0)}, None)
    assert not zombie.main_alive
    assert parse_look({}, None).error == "unit state unreadable: no answer"


def test_journal_answers_are_told_apart():
    def j(out: str, err: str = "", rc: int = 0):
        return parse_journal("h", "u.service", ProbeOutput("journal", out, err, rc), 50)

    assert j("Nov 30 12:00:01 h vllm[1]: OOM\n").lines == ["Nov 30 12:00:01 h vllm[1]: OOM"]
    # the service writes its journal: escape sequences are shown, never passed to a terminal or to Slack
    assert j("h vllm[1]: \x1b[31mERROR\x1b[0m \x1b]0;pwned\x07\n").lines == [
        "h vllm[1]: \\x1b[31mERROR\\x1b[0m \\x1b]0;pwned\\x07"
    ]
    assert "\x1b" not in j("", "journalctl: \x1b[2Jbad\n", 1).note
    assert j("", "sh: 1: journalctl: not found\n", 127).note == "h has no systemd journal: journalctl is not installed"
    assert "no journal files" in j("-- No entries --\n", "No journal files were found.\n").note
    assert j("-- No entries --\n").note == "no journal entries for u.service on h"
    assert (
        "systemd-journal group"
        in j("-- No entries --\n", "Hint: You are currently not seeing messages from other users").note
    )
