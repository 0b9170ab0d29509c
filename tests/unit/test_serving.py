"""The *serving* verdict, pure: a configured unit active, healthy and the only holder of its GPUs
reads serving; anything else about it keeps the host not ready; the host derives the same health
URL from ExecStart as gpubot does."""

import subprocess

import pytest

from bot.domain.readiness.verdict import Requirements, Severity, Verdict, assess
from bot.domain.readiness.words import stored_serving, verdict_text
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import Disk, Gpu, GpuProcess, GpuReport, HostContext, Readings, Unit, UnitService
from bot.probing.probes.servers import default_url, exec_argv, url_awk
from bot.probing.probes.serving import parse_serving, serving_command

KIMI = "vllm-kimi.service"
URL = "http://127.0.0.1:8000/health"


def gpu(i: int, used: int = 0) -> Gpu:
    return Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, used, 616, 0, 36, 120.0, "Disabled")


def host(
    procs=(), *, healthy=True, active=True, pids=(100, 101), expected="inactive", extra_units=()
) -> tuple[Readings, Requirements]:
    """Four GPUs; ``procs``: (gpu index, pid, MiB); KIMI active with ``pids`` and its health answer."""
    used = {}
    for g, _, mib in procs:
        used[g] = used.get(g, 0) + mib
    report = GpuReport(
        gpus=[gpu(i, used.get(i, 0)) for i in range(4)],
        processes=[GpuProcess(f"GPU-{g}", pid, mib, "python3") for g, pid, mib in procs],
    )
    unit = Unit(
        KIMI, "loaded", "active" if active else "inactive", "running" if active else "dead", pids[0] if active else 0
    )
    service = (
        UnitService(KIMI, True, pids[0], list(pids), ["vllm", "serve", "/m"], URL, "command", 200 if healthy else 503)
        if active
        else UnitService(KIMI, False)
    )
    r = Readings(
        report,
        [Disk("/", "/dev/vda", "/", 2 * 10**12, 10**12, 10**12)],
        [],
        None,
        [unit, *extra_units],
        HostContext(),
        services=[service],
    )
    return r, Requirements(units={KIMI: expected, **{u.name: "inactive" for u in extra_units}})


def test_a_healthy_unit_alone_on_its_gpus_is_serving():
    r, req = host([(0, 100, 70000), (1, 101, 70000)])
    a = assess(r, req)
    assert a.verdict is Verdict.SERVING and a.serving == (KIMI,)
    assert verdict_text(a.verdict, a.serving) == "serving: vllm-kimi.service (healthy)"
    assert all(x.severity is Severity.NOTE for x in a.reasons), a.reasons
    codes = [x.code for x in a.reasons]
    assert codes.count("gpu_serving") == 2 and "unit_serving" in codes and "serving" in codes
    lead = next(x for x in a.reasons if x.code == "serving")
    assert (
        lead.text
        == f"{KIMI} is serving on GPU 0, 1: {URL} → 200 (its command line's server default); no other process "
        "holds those GPUs"
    )
    assert stored_serving([{"code": x.code, "text": x.text} for x in a.reasons]) == (KIMI,)


@pytest.mark.parametrize(
    ("procs", "kw", "why"),
    [
        ([(0, 100, 70000)], {"healthy": False}, "health answered 503"),
        ([(0, 100, 70000), (0, 555, 9000)], {}, "another process shares its GPU"),
        ([], {}, "it holds no GPU"),
        ([(0, 555, 9000)], {}, "the GPU is held by someone else"),
    ],
)
def test_no_serving_verdict_unless_healthy_and_alone(procs, kw, why):
    r, req = host(procs, **kw)
    a = assess(r, req)
    assert a.verdict is Verdict.NOT_READY, why
    assert a.serving == () and not any(x.code in ("serving", "gpu_serving") for x in a.reasons), why


def test_a_stranger_on_another_gpu_keeps_the_host_not_ready():
    r, req = host([(0, 100, 70000), (3, 555, 9000)])
    a = assess(r, req)
    assert a.verdict is Verdict.NOT_READY and a.serving == (KIMI,)
    assert [x.text for x in a.reasons if x.severity is Severity.BLOCKER] == [
        "GPU 3: 9,000 MiB used by python3 (pid 555)"
    ]


def test_asked_for_room_for_another_deployment_a_serving_host_is_not_ready_saying_why():
    r, req = host([(0, 100, 70000), (1, 101, 70000)])
    a = assess(r, Requirements(need_bytes=10**9, units=req.units))
    assert a.verdict is Verdict.NOT_READY
    blockers = [x for x in a.reasons if x.severity is Severity.BLOCKER]
    assert (
        blockers[0].code == "gpu_serving" and blockers[0].text == f"GPU 0: 70,000 MiB held by {KIMI}: python3 (pid 100)"
    )
    assert any(x.code == "gpus_serving" and x.text == f"busy: serving {KIMI} (healthy, GPU 0, 1)" for x in blockers)
    assert any(x.code == "unit_state" for x in blockers)


def test_unknowns_outrank_serving_and_other_blockers_outrank_it_too():
    r, req = host(
        [(0, 100, 70000)], extra_units=[Unit("vllm-glm5.service", "loaded", None, None, None, error="timed out")]
    )
    assert assess(r, req).verdict is Verdict.UNKNOWN
    r2, req2 = host([(0, 100, 70000)], extra_units=[Unit("vllm-glm5.service", "loaded", "active", "running", 7)])
    a = assess(r2, req2)
    assert a.verdict is Verdict.NOT_READY and [x.code for x in a.reasons if x.severity is Severity.BLOCKER] == [
        "unit_state"
    ]


def test_an_unconfigured_unit_is_never_serving():
    r, _ = host([(0, 100, 70000)])
    assert assess(r, Requirements()).verdict is Verdict.NOT_READY


# --- The probe and its parser -------------------------------------------------------------------------
def probe(stdout: str, exit_status: int = 0, stderr: str = "") -> ProbeOutput:
    return ProbeOutput("serve.0", stdout, stderr, exit_status)


def hexed(text: str) -> str:
    return text.encode().hex()


def test_parse_serving_reads_state_pids_url_and_answer():
    ex = "{ path=/usr/bin/vllm ; argv[]=/usr/bin/vllm serve /m --port 8001 ; ignore_errors=no }"
    s = parse_serving(
        KIMI,
        probe(
            f"ActiveState=active\nMainPID=42\nPids=42 43 \nExec={hexed(ex)}\nUrlFrom=command\n"
            "Url=http://127.0.0.1:8001/health\nCode=200\n"
        ),
    )
    assert (s.active, s.main_pid, s.pids, s.url, s.http_code, s.error) == (
        True,
        42,
        [42, 43],
        "http://127.0.0.1:8001/health",
        200,
        None,
    )
    assert s.healthy and s.argv == ["/usr/bin/vllm", "serve", "/m", "--port", "8001"]
    assert parse_serving(KIMI, probe("ActiveState=inactive\n")) == UnitService(KIMI, False)
    refused = parse_serving(
        KIMI,
        probe(
            "ActiveState=active\nMainPID=42\nPids=42\nExec=\nUrlFrom=setting\nUrl=http://h:1/x\nCode=000\n",
            stderr="curl: (7) Failed to connect to h port 1: Connection refused\n",
        ),
    )
    assert (
        not refused.healthy
        and refused.error == "http://h:1/x: curl: (7) Failed to connect to h port 1: Connection refused"
    )
    assert (
        parse_serving(
            KIMI, probe("ActiveState=active\nMainPID=42\nPids=42\nUrlFrom=setting\nUrl=http://h:1/x\nCode=none\n")
        ).error
        == "curl is not installed on the host"
    )
    nourl = parse_serving(
        KIMI,
        probe(f"ActiveState=active\nMainPID=42\nPids=42\nExec={hexed('python3 train.py')}\nUrlFrom=command\nUrl=\n"),
    )
    assert not nourl.healthy and nourl.error.startswith("no health URL is known")
    assert parse_serving(KIMI, None).error == "the probe did not finish" and parse_serving(KIMI, None).active is None
    assert (
        parse_serving(KIMI, probe("", 1, "Failed to connect to bus")).error
        == "state unreadable: Failed to connect to bus"
    )
    assert parse_serving(KIMI, probe("", 1)).error == "state unreadable: systemctl did not answer"


def test_a_url_the_host_read_otherwise_than_gpubot_is_not_healthy():
    ex = "vllm serve '/models/my model' --port 8001"  # quoted: the host's word split differs
    s = parse_serving(
        KIMI,
        probe(
            f"ActiveState=active\nMainPID=42\nPids=42\nExec={hexed(ex)}\nUrlFrom=command\n"
            "Url=http://127.0.0.1:9/health\nCode=200\n"
        ),
    )
    assert not s.healthy and "is not the one its command line gives (http://127.0.0.1:8001/health)" in s.error


COMMAND_LINES = [
    "{ path=/usr/bin/vllm ; argv[]=/usr/bin/vllm serve /shared/Kimi-K2.5-NVFP4 --tensor-parallel-size 8 "
    "--port 8001 ; ignore_errors=no }",
    "/opt/venv/bin/python3 -m vllm.entrypoints.openai.api_server --model /m --host 0.0.0.0",
    "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --port=30001 --host 10.0.0.5",
    "text-generation-launcher --model-id meta-llama/Llama-3.1-8B-Instruct --num-shard 2",
    "/usr/local/bin/llama-server -m /models/glm5/GLM-5-Q4_K_M-00001-of-00009.gguf --host ::1 -ngl 99",
    "/usr/bin/python3 train.py --port 8000",
    "vllm serve m --port 0",
    "vllm serve m --host $(reboot)",
    "vllm serve m --port 80;",
]


def test_the_host_derives_the_same_health_url_as_gpubot():
    """The awk program the batch runs on the host agrees with default_url (one awk run per line)."""
    for line in COMMAND_LINES:
        got = subprocess.run(
            ["awk", url_awk()], input=line + "\n", capture_output=True, text=True, check=True
        ).stdout.strip()
        want = default_url(exec_argv(line))
        assert got == (want[0] if want else ""), line


def test_the_serving_probe_quotes_the_unit_and_the_url():
    cmd = serving_command("a'b;reboot.service", 0, "http://h:1/x'$(reboot)", 5)
    assert "u='a'\"'\"'b;reboot.service'; url='http://h:1/x'\"'\"'$(reboot)'; f=\"$GPUBOT_D/unit.0.out\"" in cmd
    assert "--max-time 5" in cmd
