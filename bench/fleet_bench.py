"""Fleet fan-out benchmark: gpubot (cold and pooled) against parallel-ssh, plain asyncssh and Ansible.

    pip install -e '.[bench]'          # parallel-ssh, ansible-core (pinned in pyproject.toml)
    python bench/fleet_bench.py --sizes 10,100,300 [--sizes ...,1000] [--db sqlite|postgresql]
    python bench/fleet_bench.py --help-latency 300 [--db sqlite|postgresql] [--fleet-workers local|queue|thread]

Starts N loopback hosts on real OpenSSH sshd (``tests.support.sshd``: 16 ListenAddress per sshd
process, addresses 127.1.x.y, loopback only; the fake nvidia-smi/systemctl of the tests answer as an
idle 8-GPU H200 host), registers them in a fresh database (group ``bench``) and, in ONE run, for each
N in turn:

* **gpubot cold**: ``check_fleet`` over the group in a fresh process (empty pool): DB lookup, SSH,
  parsing, verdict, batched snapshot writes — what ``/gpu status group:bench`` runs;
* **gpubot pooled**: a second ``check_fleet`` in the same process (connections reused);
* **parallel-ssh** (``ParallelSSHClient``, pool = concurrency) running ``sh -c '<gpubot's script>'``;
* **asyncssh**: plain ``asyncssh.connect`` + ``run`` per host, same command, known_hosts path per
  connection (as most code does); **asyncssh pooled**: ``run`` again on the same connections (what
  gpubot's pooled re-probe is held to);
* **runner pooled**: gpubot's :class:`~bot.probing.ssh.runner.SshRunner` alone (no parsing, no
  verdict, no database), a first round that connects and a second, timed, on its pooled connections:
  what gpubot's SSH path costs beyond plain asyncssh (the identity check, the sentinel, the script on
  standard input, the output cap);
* **Ansible** ``-m raw -a '<script>'`` with ``-f`` = concurrency, ``ControlMaster=no`` (cold) and
  ``ControlPersist`` (warm: a first run opens the masters, the second is timed).

Every tool runs gpubot's exact probe batch script (``build_script`` of the default plan) on every
host with strict host-key checking against the same known_hosts file (parallel-ssh: none; it has
no such option in its native client). Each measurement runs in its own child process; *wall* is the
fan-out's wall time, *CPU* the client's CPU seconds (user + system: ``process_time`` inside the
Python workers; for Ansible the whole command and every process it waited for — its startup
included, as a user pays it). Printed: a table per N with CPU ms per host and ratios, plus the peak
RSS of the gpubot worker (with N pooled connections open).

``--help-latency N`` runs the real Bolt app (HTTP, signed requests, Web API recorder from
``tests.support``) with N hosts, sends ``/gpu help`` 30 times with nothing else running (idle), then
starts ``/gpu status group:bench`` and sends ``/gpu help`` every 0.1 s until the fan-out's final
message; it prints p50/p99 of the time from each help request to its reply arriving at the
response_url, idle and during the fan-out, and the ratio of the two p99s. The app's services are
built as ``gpubot serve`` builds them: ``--fleet-workers local`` (the default) runs the fan-out in the
local worker process pool, ``queue`` (with ``--db postgresql``) in ``--queue-workers`` ``gpubot worker``
processes, ``thread`` in a second thread of the app's process (the design before the workers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PG_ADMIN = os.environ.get("GPUBOT_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


HOSTS_CGROUP = Path("/sys/fs/cgroup/cpu/gpubot-bench-hosts")


def background_hosts(pids: list[int]) -> str:
    """Give the fake hosts' CPU to the bot first: they stand for remote machines, whose cores are not the bot's.

    Niceness alone does not do it: sshd starts a session (``setsid``) per connection, and with the kernel's
    autogroup scheduling every session is a group with the same share as the bot's, whatever its niceness
    (300 hosts: the bot got about 1/300 of the CPU). Where the cgroup-v1 ``cpu`` controller is writable (root),
    the listeners go into one group with ``cpu.shares`` 2 (the bot's group: 1024), which their children inherit;
    otherwise they are reniced to 19. Returns which of the two was done, for the report."""
    for pid in pids:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    try:
        HOSTS_CGROUP.mkdir(exist_ok=True)
        (HOSTS_CGROUP / "cpu.shares").write_text("2")
        for pid in pids:
            (HOSTS_CGROUP / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        return f"fake hosts reniced to 19 (no cpu cgroup: {exc})"
    return "fake hosts in a cpu cgroup with cpu.shares 2 (and reniced to 19)"


def remove_hosts_cgroup() -> None:
    """Remove the cgroup :func:`background_hosts` made, once its processes are gone (``rmdir`` only
    succeeds on an empty group: one still holding a process, or none made, is left as it is)."""
    with contextlib.suppress(OSError):
        HOSTS_CGROUP.rmdir()


def addresses(n: int) -> list[str]:
    """``n`` loopback addresses 127.1.x.y (apart from the tests' 127.0.0.x)."""
    return [f"127.1.{i // 250}.{i % 250 + 1}" for i in range(n)]


def the_script() -> str:
    """gpubot's probe batch script for a host with the default settings."""
    from bot.flows.status.host import plan_for
    from bot.foundation.config import Settings
    from bot.probing.probes.registry import build_script

    plan, _ = plan_for(Settings(_env_file=None).probes, None)
    return build_script(plan)


# --- Workers (each in its own process; print one JSON line) -------------------------------------
def cpu() -> float:
    return time.process_time()


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def worker_gpubot(cfg: dict) -> dict:
    from bot.flows.status.fleet import check_fleet, hosts_of
    from bot.flows.status.loop_thread import OnThread
    from bot.foundation.config import Settings
    from bot.wiring import build_services

    settings = Settings(
        _env_file=None,
        database_url=cfg["db"],
        known_hosts=cfg["known_hosts"],
        ssh_user=cfg["user"],
        ssh_key_file=cfg["key"],
        max_concurrent_probes=cfg["concurrency"],
        ssh_connect_timeout_s=30,
        batch_timeout_s=120,
        ssh_config=os.devnull,
        ssh_pool_max=max(1024, cfg["n"]),
    )
    out: dict = {}
    async with build_services(settings) as services:
        for phase in ("cold", "pooled"):
            c0, t0 = cpu(), time.perf_counter()
            names = await hosts_of(services=services, group="bench")
            fleet = await check_fleet(services=services, names=names, title="bench", requested_by="bench")
            out[phase] = {
                "wall": time.perf_counter() - t0,
                "cpu": cpu() - c0,
                "ok": sum(1 for r in fleet.reports if r.readings is not None and r.snapshot_id is not None),
                "verdicts": dict((v.value, n) for v, n in fleet.counts.items()),
            }
        thread = services.fan_out.thread.services if isinstance(services.fan_out, OnThread) else None
        fan_out = thread or services  # the services of the fan-out's own loop
        pool = fan_out.runner.ssh.pool
        out["pooled_open"] = pool.open_count() if pool else 0
        out["peak_rss_mb"] = peak_rss_mb()
        out["known_hosts_reads"] = fan_out.runner.ssh.trusted.reads
    return out


async def worker_asyncssh(cfg: dict) -> dict:
    import asyncssh

    command = f"sh -c {shlex.quote(the_script())}"
    limit = asyncio.Semaphore(cfg["concurrency"])
    conns: dict[str, asyncssh.SSHClientConnection] = {}

    async def one(addr: str) -> bool:
        async with limit:
            try:
                conn = conns.get(addr)
                if conn is None:  # cold: a new connection, kept for the pooled round
                    conn = conns[addr] = await asyncssh.connect(
                        addr,
                        cfg["port"],
                        username=cfg["user"],
                        client_keys=[cfg["key"]],
                        known_hosts=cfg["known_hosts"],
                        config=None,
                        agent_path=None,
                    )
                res = await conn.run(command, check=False)
                return res.exit_status == 0 and "GPUBOT-" in str(res.stdout)
            except (OSError, asyncssh.Error):
                return False

    out: dict = {}
    for phase in ("run", "pooled"):  # the same connections the second time, as gpubot's pool
        c0, t0 = cpu(), time.perf_counter()
        oks = await asyncio.gather(*(one(a) for a in cfg["addresses"]))
        out[phase] = {"wall": time.perf_counter() - t0, "cpu": cpu() - c0, "ok": sum(oks)}
    for conn in conns.values():
        conn.close()
    return out


async def worker_runner(cfg: dict) -> dict:
    from bot.probing.ssh.runner import SshRunner
    from bot.probing.ssh.target import HostTarget

    script = the_script()
    runner = SshRunner(
        known_hosts=cfg["known_hosts"],
        default_user=cfg["user"],
        default_key_file=cfg["key"],
        connect_timeout=30,
        ssh_config=os.devnull,
        pool_max=max(1024, cfg["n"]),
    )
    targets = [HostTarget(name=f"h{i}", address=a, port=cfg["port"]) for i, a in enumerate(cfg["addresses"])]
    limit = asyncio.Semaphore(cfg["concurrency"])

    async def one(target: HostTarget) -> bool:
        async with limit:
            try:
                res = await runner.run(target, script, timeout=120)
            except Exception:
                return False
            return res.exit_status == 0 and "GPUBOT-" in res.stdout

    out: dict = {}
    try:
        for phase in ("cold", "pooled"):
            c0, t0 = cpu(), time.perf_counter()
            oks = await asyncio.gather(*(one(t) for t in targets))
            out[phase] = {"wall": time.perf_counter() - t0, "cpu": cpu() - c0, "ok": sum(oks)}
    finally:
        await runner.close()
    return out


def worker_pssh(cfg: dict) -> dict:
    from pssh.clients import ParallelSSHClient

    command = f"sh -c {shlex.quote(the_script())}"
    c0, t0 = cpu(), time.perf_counter()
    client = ParallelSSHClient(
        cfg["addresses"],
        user=cfg["user"],
        pkey=cfg["key"],
        port=cfg["port"],
        pool_size=cfg["concurrency"],
        num_retries=1,
        timeout=120,
    )
    output = client.run_command(command, stop_on_errors=False)
    client.join(output)
    ok = 0
    for host_out in output:
        if host_out.exception is None:
            text = "\n".join(host_out.stdout or [])
            ok += host_out.exit_code == 0 and "GPUBOT-" in text
    return {"run": {"wall": time.perf_counter() - t0, "cpu": cpu() - c0, "ok": ok}}


def run_worker(kind: str, cfg_path: str) -> None:
    with open(cfg_path) as f:
        cfg = json.load(f)
    if kind == "pssh":
        result = worker_pssh(cfg)
    else:
        workers = {"gpubot": worker_gpubot, "asyncssh": worker_asyncssh, "runner": worker_runner}
        result = asyncio.run(workers[kind](cfg))
    print(json.dumps(result))


def child(kind: str, cfg_path: str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", kind, "--config", cfg_path], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- Ansible ----------------------------------------------------------------------------------------
def ansible(cfg: dict, tmp: str, warm: bool) -> dict:
    exe = shutil.which("ansible", path=str(Path(sys.executable).parent)) or shutil.which("ansible")
    if exe is None:
        return {"error": "ansible not installed (pip install -e '.[bench]')"}
    inv = Path(tmp) / "inventory.ini"
    control = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))
    common = [
        f"-o UserKnownHostsFile={cfg['known_hosts']}",
        "-o StrictHostKeyChecking=yes",
        "-o BatchMode=yes",
        "-F /dev/null",
    ]
    common += (
        [f"-o ControlMaster=auto -o ControlPersist=300s -o ControlPath={control}/%C"]
        if warm
        else ["-o ControlMaster=no -o ControlPath=none"]
    )
    lines = ["[bench]"] + [f"h{i} ansible_host={a}" for i, a in enumerate(cfg["addresses"])]
    lines += [
        "[bench:vars]",
        f"ansible_port={cfg['port']}",
        f"ansible_user={cfg['user']}",
        f"ansible_ssh_private_key_file={cfg['key']}",
        f"ansible_ssh_common_args='{' '.join(common)}'",
    ]
    inv.write_text("\n".join(lines) + "\n")
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_LOCAL_TEMP": str(Path(tmp) / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
    }
    # Ansible templates module arguments with Jinja ({% raw %} keeps the script as it is) and reads an
    # argument starting with "{" as JSON (so the first line goes before it)
    first, rest = the_script().split("\n", 1)
    argv = [
        exe,
        "bench",
        "-i",
        str(inv),
        "-o",
        "-m",
        "raw",
        "-a",
        f"{first}\n{{% raw %}}{rest}{{% endraw %}}",
        "-f",
        str(cfg["concurrency"]),
    ]
    try:
        if warm:
            subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)  # opens the masters
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # one line per host with -o: "hN | CHANGED | rc=0 | (stdout) ..."
        ok = sum(1 for line in proc.stdout.splitlines() if "| rc=0 |" in line and "GPUBOT-" in line)
        return {
            "run": {
                "wall": wall,
                "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                "ok": ok,
            }
        }
    finally:
        if warm:  # close the masters this run opened
            for sock in control.glob("*"):
                subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, timeout=10)
        shutil.rmtree(control, ignore_errors=True)


# --- Setup ----------------------------------------------------------------------------------------
async def register(db_url: str, addrs: list[str], port: int) -> None:
    from bot.domain.hosts.models import Host
    from bot.foundation.db.migrate import upgrade_async
    from bot.foundation.db.session import make_engine, make_session_factory

    await upgrade_async(db_url)
    engine = make_engine(db_url)
    async with make_session_factory(engine)() as db, db.begin():
        db.add_all(
            [
                Host(name=f"bench{i:04d}", address=a, port=port, group="bench", transport="ssh", labels={}, probe={})
                for i, a in enumerate(addrs)
            ]
        )
    await engine.dispose()


async def make_db(kind: str, tmp: str, tag: str) -> tuple[str, object]:
    """A fresh database URL and its dropper."""
    if kind == "sqlite":
        return f"sqlite+aiosqlite:///{tmp}/bench-{tag}.db", None
    import secrets

    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    name = f"gpubot_fleet_{secrets.token_hex(4)}"
    eng = create_async_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    async with eng.connect() as c:
        await c.execute(text(f"CREATE DATABASE {name}"))
    await eng.dispose()

    async def drop() -> None:
        e = create_async_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        async with e.connect() as c:
            await c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        await e.dispose()

    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}", drop


def table(n: int, rows: dict[str, dict]) -> str:
    base = rows.get("parallel-ssh", {}).get("run", {}).get("wall")
    cold = rows.get("gpubot cold", {}).get("run", {}).get("wall")
    warm_ans = rows.get("ansible warm", {}).get("run", {}).get("wall")
    out = [
        f"\nN = {n}",
        f"{'tool':<16} {'wall s':>8} {'CPU s':>8} {'CPU ms/host':>12} {'ok':>6} "
        f"{'×pssh':>7} {'×cold':>7} {'×ans-warm':>9}",
    ]
    cpu_of = {name: r["run"]["cpu"] for name, r in rows.items() if "run" in r}
    for name, r in rows.items():
        if "error" in r:
            out.append(f"{name:<16} error: {r['error']}")
            continue
        m = r["run"]

        def ratio(b: float, wall: float = m["wall"]) -> str:
            return f"{wall / b:7.2f}" if b else f"{'-':>7}"

        out.append(
            f"{name:<16} {m['wall']:8.2f} {m['cpu']:8.2f} {1000 * m['cpu'] / n:12.2f} {m['ok']:>6} "
            f"{ratio(base)} {ratio(cold)} {(m['wall'] / warm_ans if warm_ans else float('nan')):9.2f}"
        )
    for mine, theirs in (
        ("gpubot cold", "parallel-ssh"),
        ("gpubot cold", "asyncssh"),
        ("gpubot pooled", "asyncssh pooled"),
        ("runner pooled", "asyncssh pooled"),
        ("gpubot pooled", "parallel-ssh"),
    ):
        if cpu_of.get(mine) and cpu_of.get(theirs):
            out.append(f"client CPU {mine} / {theirs}: {cpu_of[mine] / cpu_of[theirs]:.2f}×")
    return "\n".join(out)


def bench(args: argparse.Namespace) -> None:
    from tests.support.sshd import SshTestServer

    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = tempfile.mkdtemp(prefix="gpubot-fleet-bench-")
    print(
        f"# fleet_bench: sizes {sizes}, concurrency {args.concurrency}, db {args.db}, {os.cpu_count()} CPUs", flush=True
    )
    with SshTestServer(addresses(max(sizes)), start_timeout=120) as server:
        for n in sizes:
            addrs = addresses(n)
            db_url, drop = asyncio.run(make_db(args.db, tmp, str(n)))
            asyncio.run(register(db_url, addrs, server.port))
            cfg = {
                "n": n,
                "addresses": addrs,
                "port": server.port,
                "user": server.username,
                "key": server.client_key_path,
                "known_hosts": server.known_hosts_path,
                "concurrency": args.concurrency,
                "db": db_url,
            }
            cfg_path = os.path.join(tmp, f"cfg-{n}.json")
            with open(cfg_path, "w") as f:
                json.dump(cfg, f)
            rows: dict[str, dict] = {}
            g = child("gpubot", cfg_path)
            if "error" in g:
                rows["gpubot cold"] = g
            else:
                rows["gpubot cold"] = {"run": g["cold"]}
                rows["gpubot pooled"] = {"run": g["pooled"]}
            if not args.gpubot_only:
                rows["parallel-ssh"] = child("pssh", cfg_path)
                a = child("asyncssh", cfg_path)
                rows["asyncssh"] = a if "error" in a else {"run": a["run"]}
                if "pooled" in a:
                    rows["asyncssh pooled"] = {"run": a["pooled"]}
                r = child("runner", cfg_path)
                rows["runner pooled"] = r if "error" in r else {"run": r["pooled"]}
            if not args.skip_ansible and not args.gpubot_only:
                rows["ansible cold"] = ansible(cfg, tmp, warm=False)
                rows["ansible warm"] = ansible(cfg, tmp, warm=True)
            print(table(n, rows), flush=True)
            if "error" not in g:
                print(
                    f"gpubot: verdicts cold {g['cold']['verdicts']}, pooled connections open {g['pooled_open']}, "
                    f"peak RSS {g['peak_rss_mb']:.0f} MB, known_hosts parsed {g['known_hosts_reads']}×",
                    flush=True,
                )
            if drop is not None:
                asyncio.run(drop())  # type: ignore[operator]
    shutil.rmtree(tmp, ignore_errors=True)


# --- /gpu help latency during a fan-out -------------------------------------------------------------
async def help_latency(n: int, db: str, concurrency: int, fleet_workers: str = "local", queue_workers: int = 2) -> None:
    from bot.foundation.config import Settings
    from bot.wiring import build_services
    from tests.slack_env import start_bot
    from tests.support.slack_recorder import SlackApiRecorder
    from tests.support.sshd import SshTestServer

    tmp = tempfile.mkdtemp(prefix="gpubot-help-bench-")
    server = await asyncio.to_thread(lambda: SshTestServer(addresses(n), start_timeout=120).start())
    print(background_hosts([proc.pid for proc in server.procs]), flush=True)
    db_url, drop = await make_db(db, tmp, "help")
    try:
        await register(db_url, addresses(n), server.port)
        settings = Settings(
            _env_file=None,
            database_url=db_url,
            known_hosts=server.known_hosts_path,
            ssh_user=server.username,
            ssh_key_file=server.client_key_path,
            max_concurrent_probes=concurrency,
            ssh_config=os.devnull,
            fleet_workers=fleet_workers,
            ssh_pool_max=max(1024, n),
        )
        # As gpubot serve builds them: fan-outs in worker processes (the local pool, or gpubot worker on the queue)
        workers = []
        async with build_services(settings, role="serve") as services:
            if fleet_workers == "queue":
                env = {
                    **os.environ,
                    "GPUBOT_DATABASE_URL": db_url,
                    "GPUBOT_KNOWN_HOSTS": server.known_hosts_path,
                    "GPUBOT_SSH_USER": server.username,
                    "GPUBOT_SSH_KEY_FILE": server.client_key_path,
                    "GPUBOT_MAX_CONCURRENT_PROBES": str(concurrency),
                    "GPUBOT_SSH_CONFIG": os.devnull,
                    "GPUBOT_SSH_POOL_MAX": str(max(1024, n)),
                }
                workers = [
                    subprocess.Popen(
                        [sys.executable, "-m", "bot", "worker"],
                        env=env,
                        cwd=ROOT,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    for _ in range(queue_workers)
                ]
            async with SlackApiRecorder() as recorder:
                bot, close = await start_bot(services, recorder)
                try:

                    def finished() -> bool:
                        return any(" — " in str(c.body.get("text", "")) for c in recorder.calls_of("chat.update"))

                    idle: list[float] = []
                    for k in range(30):  # the same request with nothing else running: the reference
                        start = len(recorder.calls)
                        sent = time.perf_counter()
                        await bot.command("help", response_url=recorder.response_url(f"idle{k}"), trigger_id=f"idle{k}")
                        await recorder.wait_for(
                            "response_url", lambda c, k=k: c.path.endswith(f"/idle{k}"), timeout=60, start=start
                        )
                        idle.append(time.perf_counter() - sent)
                        await asyncio.sleep(0.1)
                    t0 = time.perf_counter()
                    status, _, _ = await bot.command("status group:bench", trigger_id="fan-out")
                    assert status == 200
                    latencies: list[float] = []
                    acks: list[float] = []
                    lags: list[float] = []

                    async def loop_lag() -> None:  # how late a 50 ms sleep wakes: the event loop's own delay
                        while not finished():
                            t = time.perf_counter()
                            await asyncio.sleep(0.05)
                            lags.append(time.perf_counter() - t - 0.05)

                    lag_task = asyncio.get_running_loop().create_task(loop_lag())
                    i = 0
                    while not finished() and time.perf_counter() - t0 < 600:
                        i += 1
                        start = len(recorder.calls)
                        sent = time.perf_counter()
                        _, _, ack = await bot.command(
                            "help", response_url=recorder.response_url(f"help{i}"), trigger_id=f"help{i}"
                        )
                        acks.append(ack)
                        await recorder.wait_for(
                            "response_url", lambda c, i=i: c.path.endswith(f"/help{i}"), timeout=60, start=start
                        )
                        latencies.append(time.perf_counter() - sent)
                        await asyncio.sleep(0.1)
                    fan_out = time.perf_counter() - t0
                    while not finished():
                        await asyncio.sleep(0.1)
                    await lag_task

                    def pct(xs: list[float]) -> str:
                        q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else xs * 99
                        return (
                            f"p50 {1000 * statistics.median(xs):.0f} ms, p99 {1000 * q[98]:.0f} ms, max "
                            f"{1000 * max(xs):.0f} ms"
                        )

                    def p99(xs: list[float]) -> float:
                        return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else xs[0]

                    where = f"{db}, fan-out in {fleet_workers}" + (
                        f" ({queue_workers} gpubot worker)" if fleet_workers == "queue" else ""
                    )
                    print(f"/gpu help idle ({where}), {len(idle)} requests: reply {pct(idle)}")
                    print(
                        f"/gpu help during a {n}-host fan-out ({where}, concurrency {concurrency}), {len(latencies)} "
                        "requests: "
                        f"reply {pct(latencies)}; ack {pct(acks)}; event-loop lag {pct(lags)}; "
                        f"fan-out {time.perf_counter() - t0:.1f} s (help sent for {fan_out:.1f} s)"
                    )
                    print(
                        f"reply p99 during the fan-out / idle p99: {p99(latencies) / p99(idle):.1f}× (goal: at most 3×)"
                    )
                finally:
                    await close()
                    for w in workers:  # the processes this bench started (before the services close, as ever)
                        w.terminate()
                        w.wait(30)
    finally:
        if drop is not None:
            await drop()  # type: ignore[operator]
        await asyncio.to_thread(server.stop)
        remove_hosts_cgroup()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10,100,300")
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--skip-ansible", action="store_true")
    p.add_argument("--gpubot-only", action="store_true", help="only gpubot cold/pooled (e.g. N=1000 for the peak RSS)")
    p.add_argument("--help-latency", type=int, metavar="N", help="measure /gpu help during an N-host fan-out instead")
    p.add_argument(
        "--fleet-workers",
        choices=["local", "queue", "thread"],
        default="local",
        help="--help-latency: where the fan-out runs (GPUBOT_FLEET_WORKERS; queue needs --db postgresql)",
    )
    p.add_argument("--queue-workers", type=int, default=2, help="--help-latency with queue: gpubot worker processes")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        run_worker(args.worker, args.config)
    elif args.help_latency:
        asyncio.run(help_latency(args.help_latency, args.db, args.concurrency, args.fleet_workers, args.queue_workers))
    else:
        bench(args)


if __name__ == "__main__":
    main()
