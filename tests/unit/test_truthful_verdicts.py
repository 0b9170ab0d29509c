"""Each wrong answer found on real-world hosts, as an input with its right verdict (pure layer).

The over-SSH cases (a GPU lost between two probes, a hung mount, a dropped connection) are in
tests/integration/test_truthful_over_ssh.py.
"""

import subprocess
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.domain.readiness.verdict import KnownGpu, Requirements, Verdict, assess
from bot.probing.probes.disks import parse_df
from bot.probing.probes.frames import ProbeOutput, frame_script, split_frames
from bot.probing.probes.inventory import parse_witnesses
from bot.probing.probes.nvidia_smi import GPU_FIELDS
from bot.probing.probes.nvml import parse_nvml
from bot.probing.probes.owners import owner_from_cgroup, parse_owners
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import (
    Disk,
    Gpu,
    GpuReport,
    HostContext,
    KernelGpu,
    MigDevice,
    OwnerReport,
    ProbeFailure,
    ProcessOwner,
    Readings,
    Unit,
    Witnesses,
)
from bot.probing.probes.registry import parse_batch
from tests.fixtures_h200 import captured

FIELDS = "# fields: " + ",".join(GPU_FIELDS) + "\n"


def gpu_row(i: int, used: int = 0, mig: str = "Disabled", name: str = "NVIDIA H200", total: int = 143771) -> str:
    return (
        f"{i}, GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}, {name}, 00000000:{0x18 + i:02X}:00.0, {total}, "
        f"{used}, 616, "
        f"0, 33, 70.10, {mig}, 580.159.04\n"
    )


def gpus_out(rows: str, status: int = 0) -> ProbeOutput:
    return ProbeOutput("gpus", FIELDS + rows, "", status)


def readings_of(outputs: dict[str, ProbeOutput], plan: ProbePlan | None = None) -> Readings:
    plan = plan or ProbePlan()
    base = {
        "apps": ProbeOutput("apps", "", "", 0),
        "df.0": ProbeOutput(
            "df.0", "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/sda 100 1 99 1% /\n", "", 0
        ),
        "hf": ProbeOutput("hf", "", "du: cannot access '/root/.cache/huggingface': No such file or directory\n", 1),
    }
    return parse_batch(plan, {**base, **outputs})


# --- 1. A GPU fell off the bus, nobody configured the count -----------------------------------
def test_three_of_four_by_history_names_the_missing_gpu_and_its_last_snapshot():
    r = readings_of({"gpus": gpus_out("".join(gpu_row(i) for i in range(3)))})
    seen = datetime(2026, 11, 30, 10, 15, tzinfo=UTC)
    known = tuple(
        KnownGpu(f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}", i, f"0000:{0x18 + i:02x}:00.0", 41, seen)
        for i in range(4)
    )
    a = assess(r, Requirements(known_gpus=known))
    assert a.verdict is Verdict.NOT_READY
    (reason,) = [x for x in a.reasons if x.code == "gpu_missing"]
    assert reason.text.startswith("3 of 4 GPUs present")
    assert (
        "GPU 3 GPU-00000003" in reason.text and "snapshot #41" in reason.text and "2026-11-30 10:15 UTC" in reason.text
    )


def test_three_of_four_by_the_kernel_witness_on_a_first_probe():
    kernel = "".join(
        f"proc /proc/driver/nvidia/gpus/0000:{0x18 + i:02x}:00.0\nGPU UUID: \t "
        f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}\n"
        f"Bus Location: \t 0000:{0x18 + i:02x}:00.0\nGPU Excluded:\t No\n"
        for i in range(4)
    )
    pci = "pci-scanned\n" + "".join(f"pci 0000:{0x18 + i:02x}:00.0 0x030200\n" for i in range(4))
    r = readings_of(
        {
            "gpus": gpus_out("".join(gpu_row(i) for i in range(3))),
            "inventory": ProbeOutput("inventory", kernel + pci, "", 0),
        }
    )
    a = assess(r, Requirements())
    assert a.verdict is Verdict.NOT_READY
    text = next(x.text for x in a.reasons if x.code == "gpu_missing")
    assert text.startswith("3 of 4 GPUs present") and "GPU-00000003" in text and "0000:1b:00.0" in text


def test_pci_witness_alone_counts_a_gpu_the_driver_does_not_list():
    pci = "pci-scanned\n" + "".join(f"pci 0000:{0x18 + i:02x}:00.0 0x030200\n" for i in range(4))
    r = readings_of(
        {"gpus": gpus_out("".join(gpu_row(i) for i in range(3))), "inventory": ProbeOutput("inventory", pci, "", 0)}
    )
    a = assess(r, Requirements())
    assert (
        a.verdict is Verdict.NOT_READY
        and "3 of 4 GPUs present" in a.reasons[0].text
        and "0000:1b:00.0" in a.reasons[0].text
    )


def test_captured_h200_witnesses_agree_with_nvidia_smi():
    w = parse_witnesses(
        ProbeOutput(
            "inventory",
            "proc /proc/driver/nvidia/gpus/0000:00:06.0\n"
            + captured("proc_gpus_info").stdout.split("\n", 1)[1]
            + "pci-scanned\npci 0000:00:06.0 0x030200\n",
            "",
            0,
        )
    )
    assert w.kernel == [KernelGpu("0000:00:06.0", "GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01", "NVIDIA H200", False)]
    assert w.pci == ["0000:00:06.0"]
    row = captured("query_gpu_bus_serial").stdout  # 8-digit domain in nvidia-smi, 4 in the kernel
    assert "00000000:00:06.0" in row
    r = readings_of(
        {
            "gpus": gpus_out(
                "0, GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01, NVIDIA H200, 00000000:00:06.0, 143771, 0, 616, 0, 33, "
                "70.1, Disabled, 580.159.04\n"
            ),
            "inventory": ProbeOutput("inventory", "pci-scanned\npci 0000:00:06.0 0x030200\n", "", 0),
        }
    )
    assert r.gpu.gpus[0].pci_bus_id == "0000:00:06.0"
    r = Readings(r.gpu, r.disks, r.folders, r.hf_cache, r.units, r.context, witnesses=w)
    assert assess(r, Requirements()).verdict is Verdict.READY


def test_a_driver_without_proc_entries_is_no_witness_not_zero_gpus():
    w = parse_witnesses(ProbeOutput("inventory", "pci-scanned\n", "", 0))
    assert w.kernel is None and w.pci == []
    r = readings_of({"gpus": gpus_out(gpu_row(0))})
    assert (
        assess(Readings(r.gpu, r.disks, r.folders, r.hf_cache, r.units, r.context, witnesses=w), Requirements()).verdict
        is Verdict.READY
    )


# --- 2. MIG is judged ----------------------------------------------------------------------------
def test_mig_enabled_gpu_is_unknown_unless_its_instances_were_read():
    rows = (
        gpu_row(0, used=13, mig="Enabled", name="NVIDIA A100-SXM4-80GB", total=81920)
        .replace("616", "[N/A]")
        .replace(", 0, 33", ", [N/A], 33")
    )
    rows += gpu_row(1, name="NVIDIA A100-SXM4-80GB", total=81920)
    a = assess(readings_of({"gpus": gpus_out(rows)}), Requirements())
    assert a.verdict is Verdict.UNKNOWN
    assert [r.code for r in a.reasons] == ["mig_unread"] and "GPU 0 is in MIG mode" in a.reasons[0].text


def _mig_doc(used: int, procs: list[dict]) -> str:
    import json

    mig = [
        {"uuid": "MIG-1", "memory": {"total": 40 * 2**30, "used": used}, "compute_procs": procs},
        {"uuid": "MIG-2", "memory": {"total": 40 * 2**30, "used": 0}, "compute_procs": []},
    ]
    return json.dumps(
        {
            "driver": "535.86.10",
            "gpus": [
                {
                    "index": 0,
                    "uuid": "GPU-a100",
                    "name": "NVIDIA A100-SXM4-80GB",
                    "memory_v2": {"total": 80 * 2**30, "reserved": 0, "free": 0, "used": 13 * 2**20},
                    "utilization": {"gpu": None},
                    "compute_procs": [],
                    "mig_mode": [1, 1],
                    "pci_bus_id": "00000000:07:00.0",
                    "mig_devices": mig,
                }
            ],
        }
    )


def test_mig_instances_read_through_nvml_decide():
    idle = parse_nvml(ProbeOutput("nvml", _mig_doc(5 * 2**20, []), "", 0))
    assert idle.gpus[0].mig_devices == [MigDevice("MIG-1", 40960, 5, 0), MigDevice("MIG-2", 40960, 0, 0)]
    r = readings_of({"nvml": ProbeOutput("nvml", _mig_doc(5 * 2**20, []), "", 0)}, ProbePlan(gpu_backend="nvml"))
    assert assess(r, Requirements()).verdict is Verdict.READY
    busy = readings_of(
        {
            "nvml": ProbeOutput(
                "nvml", _mig_doc(20 * 2**30, [{"pid": 77, "usedGpuMemory": 20 * 2**30, "name": "python3"}]), "", 0
            )
        },
        ProbePlan(gpu_backend="nvml"),
    )
    a = assess(busy, Requirements())
    assert a.verdict is Verdict.NOT_READY and "pid 77" in a.reasons[0].text
    held = readings_of({"nvml": ProbeOutput("nvml", _mig_doc(9 * 2**30, []), "", 0)}, ProbePlan(gpu_backend="nvml"))
    a = assess(held, Requirements())
    assert (
        a.verdict is Verdict.NOT_READY and "MIG MIG-1" in a.reasons[0].text and "no visible owner" in a.reasons[0].text
    )


# --- 3. Login noise with no newline ------------------------------------------------------------------
def test_title_escape_without_newline_before_the_first_marker():
    plan = ProbePlan(units=())
    rows = "".join(gpu_row(i) for i in range(8))
    cmds = [
        ("gpus", f"printf '%s' {_q(FIELDS + rows)}"),
        ("apps", "true"),
        ("df.0", "printf 'Filesystem 1-blocks Used Available Capacity Mounted on\\n/dev/sda 100 1 99 1%% /\\n'"),
        ("hf", "true"),
    ]
    script = frame_script(cmds, plan.marker, timeout_s=5, deadline_s=30)
    noisy = "printf '\\033]0;root@gpu-11: ~\\007'\n" + script + "printf '\\r\\033[0m bye'\n"
    out = subprocess.run(["sh", "-c", noisy], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("\x1b]0;root@gpu-11: ~\x07\n" + plan.marker)  # the noise, then a frame on the same line's end
    frames = split_frames(out, plan.marker)
    assert frames["gpus"].exit_status == 0 and frames["df.0"].exit_status == 0
    r = parse_batch(plan, frames)
    assert len(r.gpu.gpus) == 8 and assess(r, Requirements()).verdict is Verdict.READY


def test_markers_are_found_wherever_they_start():
    m = "GPUBOT-abc"
    text = (
        f"\x1b]0;title\x07{m} BEGIN gpus\nrow\n{m} STDERR gpus\n\n{m} END gpus 0\r\nnoise\x00 {m} BEGIN "
        f"apps\n\n{m} STDERR apps\n\n{m} END apps 0"
    )
    got = split_frames(text, m)
    assert got["gpus"].stdout == "row" and got["gpus"].exit_status == 0 and got["apps"].exit_status == 0


# --- 4. Driver failures are named -------------------------------------------------------------------
def test_nvml_library_missing_is_not_ready_with_its_name_and_hint():
    out = ProbeOutput(
        "gpus",
        "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
        "Display Driver is properly installed and present in your system.\n",
        "",
        12,
    )
    r = readings_of({"gpus": out})
    a = assess(r, Requirements())
    assert a.verdict is Verdict.NOT_READY and a.reasons[0].text.startswith("NVIDIA driver library (NVML) not found")
    assert r.gpu.hint and "libnvidia-ml" in r.gpu.hint


def test_each_driver_failure_class_has_its_cause():
    cases = {
        9: ("", ProbeFailure.DRIVER, "not loaded"),
        18: ("Failed to initialize NVML: Driver/library version mismatch\n", ProbeFailure.VERSION_MISMATCH, "reboot"),
        15: (
            "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n",
            ProbeFailure.GPU_LOST,
            "fallen off the bus",
        ),
        6: ("No devices were found\n", ProbeFailure.NO_DEVICES, "found no GPU"),
        255: (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            ProbeFailure.DRIVER,
            "not loaded",
        ),
    }
    for status, (stdout, kind, words) in cases.items():
        r = readings_of({"gpus": ProbeOutput("gpus", stdout, "", status)})
        a = assess(r, Requirements())
        assert r.gpu.failure is kind, status
        assert a.verdict is Verdict.NOT_READY and words in a.reasons[0].text, (status, a.reasons)
    unclassified = readings_of({"gpus": ProbeOutput("gpus", "something odd\n", "", 255)})
    assert assess(unclassified, Requirements()).verdict is Verdict.UNKNOWN
    timed_out = readings_of({"gpus": ProbeOutput("gpus", "", "gpubot: no answer within 20 s\n", 124)})
    assert assess(timed_out, Requirements()).verdict is Verdict.UNKNOWN


def test_nvml_backend_equivalents():
    for text, kind in (
        ("NVML error 9: Driver Not Loaded", ProbeFailure.DRIVER),
        ("NVML error 12: NVML Shared Library Not Found", ProbeFailure.DRIVER_LIBRARY),
        ("NVML error 18: Driver/library version mismatch", ProbeFailure.VERSION_MISMATCH),
        ("NVML error 15: GPU is lost", ProbeFailure.GPU_LOST),
    ):
        report = parse_nvml(ProbeOutput("nvml", text + "\n", "", 3))
        assert report.failure is kind and report.hint
        r = Readings(report, [], [], None, [], HostContext())
        assert assess(r, Requirements()).verdict is Verdict.NOT_READY
    assert parse_nvml(ProbeOutput("nvml", "NVML error 999: Unknown Error\n", "", 3)).failure is ProbeFailure.FAILED


# --- 5. df read from the right ----------------------------------------------------------------------
HEADER = "Filesystem         1-blocks           Used      Available Capacity Mounted on\n"


def test_df_source_with_spaces():
    d = parse_df(
        "/shared",
        ProbeOutput(
            "df.0",
            HEADER + "//nas01/Model Store/weights 17592186044416 15442257166336 2149928878080 88% /shared\n",
            "",
            0,
        ),
    )
    assert (d.size_bytes, d.used_bytes, d.avail_bytes, d.mount, d.filesystem) == (
        17592186044416,
        15442257166336,
        2149928878080,
        "/shared",
        "//nas01/Model Store/weights",
    )
    r = Readings(
        GpuReport(gpus=[Gpu(0, "GPU-0", "H200", 1, 0, 0, 0, 30, 70.0, "Disabled")]), [d], [], None, [], HostContext()
    )
    assert assess(r, Requirements(need_bytes=500 * 10**9)).verdict is Verdict.READY


def test_df_wrapped_source_and_mount_with_spaces():
    d = parse_df(
        "/shared",
        ProbeOutput(
            "df.0",
            HEADER + "//nas01.example.internal/a-very-long-export-name/for/weights\n"
            "     17592186044416 15442257166336 2149928878080      88% /shared\n",
            "",
            0,
        ),
    )
    assert (d.size_bytes, d.avail_bytes, d.mount) == (17592186044416, 2149928878080, "/shared")
    d = parse_df("/mnt/Model Store", ProbeOutput("df.0", HEADER + "/dev/sdb1 1000 10 990 1% /mnt/Model Store\n", "", 0))
    assert d.mount == "/mnt/Model Store" and d.avail_bytes == 990


def test_df_timeout_is_named():
    d = parse_df("/shared", ProbeOutput("df.0", "", "gpubot: no answer within 7 s\n", 124))
    assert d.avail_bytes is None and d.error == "df did not answer within 7 s"


# --- 9. A failed unit is a warning -------------------------------------------------------------------
def test_failed_unit_on_a_ready_host_is_a_warning():
    r = readings_of({"gpus": gpus_out(gpu_row(0))})
    r = Readings(
        r.gpu, r.disks, r.folders, r.hf_cache, [Unit("vllm.service", "loaded", "failed", "failed", 0)], r.context
    )
    a = assess(r, Requirements(units={"vllm.service": "inactive"}))
    assert a.verdict is Verdict.READY
    assert [x.text for x in a.reasons] == [
        "vllm.service failed: its last run crashed (see `journalctl -u vllm.service`)"
    ]


# --- Who holds each GPU ---------------------------------------------------------------------------------
def test_owner_from_cgroup_paths():
    assert owner_from_cgroup("/system.slice/vllm.service")["unit"] == "vllm.service"
    d = owner_from_cgroup("/system.slice/docker-" + "a" * 64 + ".scope")
    assert (d["container_id"], d["runtime"], d["unit"]) == ("a" * 64, "docker", None)
    k = owner_from_cgroup(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_1111_2222_3333_444455556666.slice/"
        "cri-containerd-" + "c" * 64 + ".scope"
    )
    assert (k["pod_uid"], k["runtime"], k["container_id"]) == (
        "0b1c2d3e-1111-2222-3333-444455556666",
        "containerd",
        "c" * 64,
    )
    assert owner_from_cgroup("/machine.slice/libpod-" + "e" * 64 + ".scope")["runtime"] == "podman"
    # The captured sandbox: neither a unit nor a container, and no guess.
    sandbox = captured("holder_cgroup").stdout.strip().split(":", 2)[-1]
    assert set(owner_from_cgroup(sandbox).values()) == {None}


def test_a_user_unit_or_a_guest_unit_named_like_a_system_unit_is_never_that_system_unit():
    """A researcher's own ``systemd-run --user --unit=vllm`` and an nspawn guest's vllm.service lie in
    cgroups whose last unit is ``vllm.service``: neither is the host's system unit of that name."""
    user = owner_from_cgroup("/user.slice/user-1019.slice/user@1019.service/app.slice/vllm.service")
    assert (user["unit"], user["inner_unit"], user["user_uid"]) == (None, "vllm.service", "1019")
    session = owner_from_cgroup("/user.slice/user-1019.slice/session-3.scope")
    assert (session["unit"], session["inner_unit"], session["user_uid"]) == ("session-3.scope", None, "1019")
    guest = owner_from_cgroup("/machine.slice/machine-lab\\x2dguest.scope/payload/system.slice/vllm.service")
    assert (guest["unit"], guest["inner_unit"], guest["machine"]) == (None, "vllm.service", "lab-guest")
    nspawn = owner_from_cgroup("/machine.slice/systemd-nspawn@box.service/payload/system.slice/vllm.service")
    assert (nspawn["unit"], nspawn["machine"]) == (None, "box")
    assert owner_from_cgroup("/gpu.slice/vllm.service")["unit"] == "vllm.service"  # a system unit in a slice of its own
    text = (
        "pid 77 listed\nps 77 alice 60 python3 -m vllm\n"
        "cgroup 77 1:name=systemd:/user.slice/user-1019.slice/user@1019.service/app.slice/vllm.service\n"
        "cgroup 77 0::/user.slice/user-1019.slice/user@1019.service/app.slice/vllm.service\n"
    )
    (o,) = parse_owners(ProbeOutput("owners", text, "", 0)).owners
    assert (o.unit, o.inner_unit, o.user_uid, o.user) == (None, "vllm.service", 1019, "alice")
    assert o.cgroup == "/user.slice/user-1019.slice/user@1019.service/app.slice/vllm.service"


def test_owners_probe_output_with_captured_holder():
    ps = captured("ps_holder8g").stdout.splitlines()[1].split()
    line = f"ps {ps[0]} {ps[2]} {ps[3]} " + captured("ps_holder8g").stdout.splitlines()[1].split(None, 9)[9]
    text = (
        "pid 960 listed\n" + line + "\n" + "cgroup 960 " + captured("holder_cgroup").stdout.strip() + "\n"
        "pid 4242 listed\nps 4242 vllm 3600 /usr/bin/python3 -m vllm.entrypoints.openai.api_server --port 8000\n"
        "cgroup 4242 0::/system.slice/vllm.service\n"
    )
    rep = parse_owners(ProbeOutput("owners", text, "", 0))
    o960, o4242 = rep.owners
    assert (o960.user, o960.elapsed_s, o960.unit, o960.container_id) == ("root", 15, None, None)
    assert o960.command.startswith("/opt/torch/.venv/bin/python3 -c import torch")
    assert (o4242.unit, o4242.user, o4242.elapsed_s) == ("vllm.service", "vllm", 3600)


def test_busy_reason_names_the_unit_and_no_owner_lists_device_file_holders():
    from bot.probing.probes.readings import GpuProcess

    g = Gpu(0, "GPU-0", "H200", 143771, 40000, 616, 90, 60, 600.0, "Disabled")
    r = Readings(
        GpuReport(gpus=[g], processes=[GpuProcess("GPU-0", 4242, 40000, "python3")]),
        [],
        [],
        None,
        [],
        HostContext(),
        owners=OwnerReport([ProcessOwner(4242, unit="vllm.service")]),
    )
    assert "of vllm.service" in assess(r, Requirements()).reasons[0].text
    r = Readings(
        GpuReport(gpus=[g]),
        [],
        [],
        None,
        [],
        HostContext(),
        owners=OwnerReport(
            [ProcessOwner(960, source="device-file", user="root", command="/opt/torch/.venv/bin/python3 -c x")]
        ),
    )
    text = assess(r, Requirements()).reasons[0].text
    assert "no visible owner" in text and "/dev/nvidia* is open in python3 (pid 960, root)" in text


# --- Stored readings load across versions ----------------------------------------------------------------
def test_version_one_readings_still_load():
    import json
    from pathlib import Path

    old = json.loads((Path(__file__).parents[1] / "fixtures" / "stored" / "readings_v1.json").read_text())
    r = Readings.from_json(old)
    assert r.gpu.gpus[0].pci_bus_id is None and r.owners is None and r.witnesses is None
    assert Readings.from_json(r.to_json()) == r


# --- The batch parser never raises and never says ready on what it could not read ---------------------------
NAMES = ["gpus", "apps", "df.0", "hf", "inventory", "owners", "driver", "uptime", "hostname"]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(NAMES),
        st.tuples(st.text(max_size=300), st.text(max_size=60), st.one_of(st.none(), st.integers(-1, 300))),
        max_size=len(NAMES),
    ),
    st.binary(max_size=200),
)
def test_batch_parser_never_raises_and_never_says_ready_without_inputs(frames, noise):
    m = "GPUBOT-feed"
    text = noise.decode("latin-1") + "".join(
        f"{m} BEGIN {n}\n{out}\n{m} STDERR {n}\n{err}\n" + (f"{m} END {n} {rc}\n" if rc is not None else "")
        for n, (out, err, rc) in frames.items()
    )
    text = text[: len(text) - (len(noise) % 7)]  # sometimes truncated mid-frame
    outputs = split_frames(text, m)
    r = parse_batch(ProbePlan(), outputs)
    a = assess(r, Requirements(need_bytes=1))
    if a.verdict is Verdict.READY:
        assert r.gpu.failure is None and r.gpu.gpus
        assert outputs["gpus"].exit_status == 0 and outputs["apps"].exit_status == 0
        assert r.disks[0].avail_bytes is not None and outputs["df.0"].exit_status == 0


@pytest.mark.process  # a shell per example
@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(NAMES),
            st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=80),
            st.integers(0, 255),
        ),
        max_size=5,
        unique_by=lambda t: t[0],
    )
)
def test_frame_round_trip_through_a_real_shell(items):
    marker = "GPUBOT-0123"
    cmds = [(n, f"printf '%s' {_q(out)}; exit {rc}") for n, out, rc in items]
    out = subprocess.run(
        ["sh", "-c", frame_script(cmds, marker, timeout_s=5, deadline_s=60)], capture_output=True, timeout=60
    ).stdout.decode("utf-8", "replace")
    got = split_frames(out, marker)
    for n, text, rc in items:
        assert got[n].stdout == text and got[n].exit_status == rc


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def test_disk_helper():
    assert Disk("/x").avail_bytes is None and Witnesses().kernel is None


# --- The whole batch as it ran on a real H200 (driver 580.159.04), idle and with an 8 GiB torch holder ---
def _real_batch(name: str, backend: str) -> Readings:
    from tests.fixtures_h200 import H200

    text = (H200 / f"batch_{name}.out").read_text()
    plan = ProbePlan(units=("vllm.service",), gpu_backend=backend, marker="GPUBOT-devcheck")
    return parse_batch(plan, split_frames(text, plan.marker))


def test_real_h200_batches_parse_and_judge():
    idle = _real_batch("idle_nvidia-smi", "nvidia-smi")
    assert idle.gpu.gpus[0].pci_bus_id == "0000:00:06.0" and idle.witnesses.pci == ["0000:00:06.0"]
    assert idle.witnesses.kernel[0].uuid == idle.gpu.gpus[0].uuid and idle.owners.owners == []
    a = assess(idle, Requirements())
    assert a.verdict is Verdict.READY
    # no systemd on that machine: a configured unit is unknown, never clean
    assert assess(idle, Requirements(units={"vllm.service": "inactive"})).verdict is Verdict.UNKNOWN
    for name, backend in (("busy_nvidia-smi", "nvidia-smi"), ("busy_nvml", "nvml")):
        busy = _real_batch(name, backend)
        (owner,) = busy.owners.owners
        assert (owner.pid, owner.user, owner.elapsed_s, owner.unit, owner.container_id) == (599, "root", 20, None, None)
        assert owner.command.startswith("python3 -c import torch")
        a = assess(busy, Requirements())
        assert a.verdict is Verdict.NOT_READY and "pid 599" in a.reasons[0].text, (name, a.reasons)
