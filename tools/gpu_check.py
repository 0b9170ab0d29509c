"""Check gpubot's probe against a real NVIDIA GPU (run on a GPU machine; CI never runs this).

    python tools/gpu_check.py [--sshd /usr/sbin/sshd] [--hold-gib 40]

1. Reads the GPUs directly with nvidia-smi.
2. Runs gpubot's probe batch locally with the nvidia-smi backend and the NVML backend, and checks both
   agree with (1) in MiB.
3. With --sshd: starts that OpenSSH sshd on 127.0.0.1 (a free port, generated keys, strict known_hosts)
   and runs the same batch over SSH to this machine.
4. With --hold-gib: starts a PyTorch process holding that much GPU memory, probes (expects *not ready*
   naming its pid), ends it with the kill step's own script (pinned by start time and command line),
   and probes until the GPU is free again (expects *ready*).
Prints a JSON summary; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.domain.readiness.verdict import Requirements, assess  # noqa: E402
from bot.flows.actions.plan import ProcItem  # noqa: E402
from bot.flows.actions.remote import kill_results, kill_script  # noqa: E402
from bot.probing.probes.engine import run_probe  # noqa: E402
from bot.probing.probes.probe import ProbePlan  # noqa: E402
from bot.probing.ssh.runner import LocalRunner, SshRunner  # noqa: E402
from bot.probing.ssh.target import HostTarget  # noqa: E402


def smi_direct() -> dict[str, list[int]]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [[int(x) for x in line.split(",")] for line in out.strip().splitlines()]
    return {"used_mib": [r[1] for r in rows], "total_mib": [r[2] for r in rows]}


def summary(result) -> dict:
    r = result.readings
    if r is None:
        return {"error": result.error}
    a = assess(r, Requirements())
    return {
        "verdict": a.verdict.value,
        "reasons": [x.text for x in a.reasons],
        "duration_ms": result.duration_ms,
        "gpu_source": r.gpu.source,
        "gpu_failure": r.gpu.message,
        "gpus": [(g.index, g.name, g.memory_used_mib, g.memory_reserved_mib, g.memory_total_mib) for g in r.gpu.gpus],
        "processes": [(p.pid, p.process_name, p.used_memory_mib) for p in r.gpu.processes],
        "driver": r.gpu.driver_version,
        "disk_free": [d.avail_bytes for d in r.disks],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(sshd: str, tmp: Path) -> tuple[subprocess.Popen, int, str, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "host")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "client")], check=True)
    shutil.copy(tmp / "client.pub", tmp / "authorized_keys")
    os.makedirs("/run/sshd", exist_ok=True)
    port = free_port()
    (tmp / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1:{port}\nHostKey {tmp / 'host'}\nAuthorizedKeysFile {tmp / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nStrictModes no\nPidFile {tmp / 'sshd.pid'}\n"
        f"SetEnv PATH={os.environ['PATH']}\n"
    )
    with open(tmp / "sshd.log", "w") as log:  # sshd keeps its own copy of the descriptor
        proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(tmp / "sshd_config")], stderr=log)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    key = (tmp / "host.pub").read_text().split()
    (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {key[0]} {key[1]}\n")
    return proc, port, str(tmp / "known_hosts"), str(tmp / "client")


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sshd")
    ap.add_argument("--hold-gib", type=int, default=0)
    args = ap.parse_args()
    report: dict = {"direct": smi_direct()}
    local = HostTarget("local", "localhost", transport="local")
    ok = True
    for backend in ("nvidia-smi", "nvml"):
        res = await run_probe(target=local, plan=ProbePlan(gpu_backend=backend), runner=LocalRunner(), timeout=60)
        report[f"local_{backend}"] = summary(res)
        used = [g[2] for g in report[f"local_{backend}"].get("gpus", [])]
        direct = report["direct"]["used_mib"]
        agree = len(used) == len(direct) and all(abs(a - b) <= 1 for a, b in zip(used, direct, strict=True))
        report[f"local_{backend}_agrees"] = agree
        ok &= agree
    tmp = Path(tempfile.mkdtemp())
    if args.sshd:
        proc, port, known, key = start_sshd(args.sshd, tmp)
        try:
            runner = SshRunner(known_hosts=known, default_user="root", default_key_file=key)
            target = HostTarget("self-ssh", "127.0.0.1", port)
            res = await run_probe(target=target, plan=ProbePlan(), runner=runner, timeout=60)
            report["ssh_nvidia-smi"] = summary(res)
            ok &= res.readings is not None
            res = await run_probe(target=target, plan=ProbePlan(gpu_backend="nvml"), runner=runner, timeout=60)
            report["ssh_nvml"] = summary(res)
        finally:
            proc.terminate()
            report["sshd_log_tail"] = (tmp / "sshd.log").read_text()[-500:]
    if args.hold_gib:
        code = (
            f"import torch,time; x=torch.empty({args.hold_gib}*2**30, dtype=torch.uint8, device='cuda'); "
            "print('held', flush=True); time.sleep(600)"
        )
        holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        holder.stdout.readline()
        res = await run_probe(target=local, plan=ProbePlan(), runner=LocalRunner(), timeout=60)
        report["busy"] = summary(res)
        report["busy_names_holder"] = any(f"pid {holder.pid}" in r for r in report["busy"]["reasons"])
        ok &= report["busy"]["verdict"] == "not_ready" and report["busy_names_holder"]
        # End it the way an approved kill step does (the typed step's script, pinned by start time and cmdline).
        stat = Path(f"/proc/{holder.pid}/stat").read_text()
        planned = ProcItem(
            holder.pid,
            "python3",
            0,
            None,
            stat.rsplit(")", 1)[1].split()[19],
            hashlib.sha256(Path(f"/proc/{holder.pid}/cmdline").read_bytes()).hexdigest(),
            "holder",
        )
        step = await LocalRunner().run(local, kill_script([planned], 5.0)[1], timeout=60)
        report["kill_step"] = {"exit_status": step.exit_status, "results": kill_results(step.stdout)}
        ok &= step.exit_status == 0 and report["kill_step"]["results"].get(holder.pid) in ("terminated", "killed")
        if holder.poll() is None:
            holder.kill()
        holder.wait()
        started = time.monotonic()
        while True:
            res = await run_probe(target=local, plan=ProbePlan(), runner=LocalRunner(), timeout=60)
            s = summary(res)
            if s["verdict"] == "ready" or time.monotonic() - started > 20:
                break
            await asyncio.sleep(0.5)
        report["after_kill"] = s
        report["after_kill_s"] = round(time.monotonic() - started, 2)
        ok &= s["verdict"] == "ready"
    report["ok"] = bool(ok)
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
