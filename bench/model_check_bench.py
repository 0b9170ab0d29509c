"""What the new model's check and the *serving* look cost, over real OpenSSH on loopback.

    python bench/model_check_bench.py [--runs 20]

Starts the tests' sshd (``tests.support.sshd``: one loopback host, the fake nvidia-smi/systemctl of an
idle 8-GPU H200 box) and, on one pooled connection, times ``--runs`` times each:

* **status batch**, with no configured unit, with two inactive configured units (their ``serve.N``
  probes read the ``unit.N`` output: no more ``systemctl`` call), the same batch without the
  ``serve.N`` probes (what they cost), and with one unit active and answering ``/health`` (a real
  HTTP server on loopback; its probe runs one more ``systemctl show``, reads its PIDs and ``curl``s
  the URL). The fake ``systemctl`` and ``nvidia-smi`` are Python programs (~0.1-0.4 s a start on a
  loaded 2-core machine), so the absolute figures are the fakes'; the differences are what counts;
* **model check** (:func:`bot.flows.actions.model_gate.check_model`, the planner's two read-only round
  trips) of a unit whose ``vllm serve`` names a 64-shard folder (sparse 8.4 GB shards: 540 GB), and of
  one naming a hub id found in an HF cache laid out as huggingface_hub does (symlinks into blobs/).

Prints the median and the 90th percentile of each, in ms (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.flows.actions.model_gate import check_model  # noqa: E402
from bot.probing.probes.engine import run_probe  # noqa: E402
from bot.probing.probes.frames import frame_script  # noqa: E402
from bot.probing.probes.probe import ProbePlan  # noqa: E402
from bot.probing.probes.readings import Folder, FolderState, Gpu, GpuReport, HostContext, Readings  # noqa: E402
from bot.probing.probes.registry import probe_commands  # noqa: E402
from bot.probing.ssh.runner import SshRunner  # noqa: E402
from bot.probing.ssh.target import HostTarget  # noqa: E402
from tests.support import fakestate  # noqa: E402
from tests.support.fakestate import exec_start, unit  # noqa: E402
from tests.support.sshd import SshTestServer, free_port  # noqa: E402

GB = 10**9


def model_folder(root: Path, shards: int, shard_bytes: int) -> Path:
    folder = root / "Kimi-K2.5-NVFP4"
    folder.mkdir(parents=True)
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    weight_map = {
        f"model.layers.{i}.experts.{e}.w{w}.weight": n
        for i, n in enumerate(names)
        for e in range(384)
        for w in (1, 2, 3)
    }
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": shards * shard_bytes}, "weight_map": weight_map})
    )
    for n in names:
        with open(folder / n, "wb") as f:
            f.truncate(shard_bytes)
    return folder


def hub_cache(root: Path, shards: int) -> Path:
    repo = root / "hub" / "models--moonshotai--Kimi-K2.5"
    snap = repo / "snapshots" / "4f1c2e9"
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("4f1c2e9")
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    (snap / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {f"t{i}": n for i, n in enumerate(names)}})
    )
    for n in names:
        with open(repo / "blobs" / f"sha-{n}", "wb") as f:
            f.truncate(GB)
        os.symlink(f"../../blobs/sha-{n}", snap / n)
    return root


def serve_health(port: int) -> http.server.HTTPServer:
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def timed(label: str, runs: int, fn) -> None:  # type: ignore[no-untyped-def]
    await fn()  # warm: the pooled connection is open
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await fn()
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    print(f"{label:<62} median {statistics.median(ms):7.1f} ms   p90 {ms[int(len(ms) * 0.9) - 1]:7.1f} ms")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with SshTestServer(["127.0.0.1"]) as server, tempfile.TemporaryDirectory() as tmp:
        runner = SshRunner(
            known_hosts=server.known_hosts_path,
            default_user=server.username,
            default_key_file=server.client_key_path,
            connect_timeout=5.0,
        )
        target = HostTarget("bench", "127.0.0.1", server.port)
        port = free_port()
        health = serve_health(port)
        folder = model_folder(Path(tmp) / "shared", 64, 540 * GB // 64)
        cache = hub_cache(Path(tmp) / "hf", 64)
        units = {
            "vllm-glm5.service": unit(active=False),
            "vllm-kimi.service": {
                **unit(active=False),
                "ExecStart": exec_start("/usr/bin/vllm", "serve", str(folder), "-tp", "8", "--port", str(port)),
            },
            "vllm-hub.service": {
                **unit(active=False),
                "ExecStart": exec_start("/usr/bin/vllm", "serve", "moonshotai/Kimi-K2.5", "-tp", "8"),
            },
        }
        fakestate.update_state(server, "127.0.0.1", units=units)
        try:
            for label, names in (
                ("status batch, no configured unit", ()),
                ("status batch, 2 configured units, inactive", ("vllm-glm5.service", "vllm-kimi.service")),
            ):
                plan = ProbePlan(units=names)
                await timed(
                    label, args.runs, lambda plan=plan: run_probe(target=target, plan=plan, runner=runner, timeout=30)
                )
            plan = ProbePlan(units=("vllm-glm5.service", "vllm-kimi.service"))
            bare = [(n, c) for n, c in probe_commands(plan) if not n.startswith("serve.")]
            await timed(
                "status batch, 2 configured units, inactive, no serve.N probes",
                args.runs,
                lambda: runner.run(target, frame_script(bare, plan.marker, timeout_s=20, deadline_s=55), timeout=30),
            )
            me = os.getpid()  # a live process stands in for the unit's main process
            fakestate.update_state(
                server,
                "127.0.0.1",
                units={**units, "vllm-kimi.service": {**units["vllm-kimi.service"], **unit(active=True, main_pid=me)}},
            )
            plan = ProbePlan(units=("vllm-glm5.service", "vllm-kimi.service"))
            res = await run_probe(target=target, plan=plan, runner=runner, timeout=30)
            assert res.readings and res.readings.services[1].healthy, (
                res.readings.services if res.readings else res.error
            )
            await timed(
                "status batch, 2 units, one active and healthy (curl)",
                args.runs,
                lambda: run_probe(target=target, plan=plan, runner=runner, timeout=30),
            )
            for label, name, hf in (
                ("model check, local folder of 64 shards (2 round trips)", "vllm-kimi.service", None),
                ("model check, hub id in an HF cache, 64 shards (2 round trips)", "vllm-hub.service", cache),
            ):
                gpus = [Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, 0, 616, 0, 30, 100.0, "Disabled") for i in range(8)]
                readings = Readings(
                    GpuReport(gpus=gpus),
                    [],
                    [],
                    Folder(str(hf), FolderState.PRESENT) if hf else None,
                    [],
                    HostContext(),
                )
                gate = await check_model(
                    runner=runner,
                    target=target,
                    timeout=30,
                    host="bench",
                    unit=name,
                    readings=readings,
                    need_bytes=None,
                )
                assert not gate.refusals and gate.lines, gate
                await timed(
                    label,
                    args.runs,
                    lambda name=name, readings=readings: check_model(
                        runner=runner,
                        target=target,
                        timeout=30,
                        host="bench",
                        unit=name,
                        readings=readings,
                        need_bytes=None,
                    ),
                )
        finally:
            health.shutdown()
            await runner.close()


if __name__ == "__main__":
    asyncio.run(main())
