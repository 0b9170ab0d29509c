"""Fleet readiness as metrics: /metrics of the real app, scraped after probes over
the real sshd, carries each registered host's series with the values of its newest snapshot; the
Grafana dashboard and the example alert rules name only metrics the bot exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp
import pytest
import yaml
from pydantic import SecretStr

from bot.domain.hosts import service as hosts
from bot.domain.observability.readyz import Readiness
from bot.domain.snapshots import service as snapshots
from bot.flows.status.fleet import check_fleet
from bot.probing.probes.readings import Readings
from bot.slack.app import build_app
from bot.slack.http import start_http
from tests.support.slack_recorder import SlackApiRecorder

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "gpubot-fleet.json"
RULES = ROOT / "deploy" / "prometheus" / "gpubot-alerts.yml"
MIB = 1 << 20
A, B = "127.0.0.16", "127.0.0.17"


@pytest.fixture
async def scrape(services):
    async with SlackApiRecorder() as recorder:
        services.settings.slack.slack_bot_token = SecretStr("xoxb-test")
        services.settings.slack.slack_signing_secret = SecretStr("s3cret-signing")
        services.settings.slack.slack_api_url = recorder.url
        runner, port = await start_http(
            build_app(services),
            host="127.0.0.1",
            port=0,
            readiness=Readiness(sessions=services.sessions, gate=services.gate),
            services=services,
        )
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as http:

            async def get() -> str:
                async with http.get("/metrics") as r:
                    assert r.status == 200
                    return await r.text()

            yield get
        await runner.cleanup()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(name, labels) -> value of every sample in Prometheus text format."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        pairs = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))
        out[(name, pairs)] = float(value)
    return out


def value(s, name, **labels) -> float | None:
    return s.get((name, frozenset(labels.items())))


async def test_metrics_after_probes_carry_each_hosts_series_from_its_newest_snapshot(
    services, ssh_server, fake_hosts, scrape
):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train16", address=A, port=ssh_server.port, group="train")
        await hosts.add(db_session=db, name="spare17", address=B, port=ssh_server.port)
        await hosts.add(db_session=db, name="never18", address="127.0.0.18", port=ssh_server.port, group="train")
    fake_hosts.hold(A, gpu=3, used_mib=20_000)
    await check_fleet(services=services, names=["train16", "spare17"], title="t", requested_by="test")
    before = services.clock()
    s = samples(await scrape())
    after = services.clock()

    t16 = {"host": "train16", "group": "train"}
    assert value(s, "gpubot_host_verdict", **t16, verdict="not_ready") == 1
    assert [
        value(s, "gpubot_host_verdict", **t16, verdict=v) for v in ("ready", "serving", "unknown", "unreachable")
    ] == [0] * 4
    assert value(s, "gpubot_host_verdict", host="spare17", group="", verdict="ready") == 1
    # registered, never probed: no verdict is 1, and no snapshot series
    assert [
        value(s, "gpubot_host_verdict", host="never18", group="train", verdict=v)
        for v in ("ready", "serving", "not_ready", "unknown", "unreachable")
    ] == [0] * 5
    assert value(s, "gpubot_host_snapshot_age_seconds", host="never18", group="train") is None

    async with services.sessions() as db:
        snap = await snapshots.latest(db_session=db, host_name="train16")
    gpus = Readings.from_json(snap.readings).gpu.gpus
    assert value(s, "gpubot_host_gpus_present", **t16) == 8 and value(s, "gpubot_host_gpus_expected", **t16) == 8
    for g in gpus:
        assert value(s, "gpubot_gpu_memory_used_bytes", **t16, gpu=str(g.index)) == g.memory_used_mib * MIB
        assert value(s, "gpubot_gpu_memory_total_bytes", **t16, gpu=str(g.index)) == 143_771 * MIB
    used = {g: value(s, "gpubot_gpu_memory_used_bytes", **t16, gpu=str(g)) for g in range(8)}
    assert used[3] >= 20_000 * MIB and all(
        used[g] < 1_000 * MIB for g in range(8) if g != 3
    )  # the holder shows on GPU 3 only
    assert value(s, "gpubot_host_disk_free_bytes", **t16) == snap.disk_free_bytes > 0
    age = value(s, "gpubot_host_snapshot_age_seconds", **t16)  # the scrape's clock less the snapshot's stamp
    assert (before - snap.taken_at).total_seconds() <= age <= (after - snap.taken_at).total_seconds()
    assert value(s, "gpubot_host_findings", **t16, severity="blocker") >= 1

    # the holder ends and the host is probed again: the series follow the newest snapshot
    fake_hosts.reset()
    await check_fleet(services=services, names=["train16"], title="t", requested_by="test")
    s = samples(await scrape())
    assert value(s, "gpubot_host_verdict", **t16, verdict="ready") == 1
    assert value(s, "gpubot_host_verdict", **t16, verdict="not_ready") == 0
    assert value(s, "gpubot_gpu_memory_used_bytes", **t16, gpu="3") < 1_000 * MIB

    # a removed host's series go
    async with services.sessions() as db, db.begin():
        await hosts.remove(db_session=db, name="spare17")
    s = samples(await scrape())
    assert not [k for k in s if ("host", "spare17") in k[1]]


def _exposed(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^# TYPE (\w+) ", text, re.M)} | {k[0] for k in samples(text)}


def _queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = [(f"dashboard panel {p['title']!r}", t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    out += [
        (f"dashboard variable {v['name']!r}", v["query"]["query"])
        for v in dash["templating"]["list"]
        if isinstance(v.get("query"), dict)
    ]
    rules = yaml.safe_load(RULES.read_text())
    out += [(f"alert {r['alert']}", r["expr"]) for g in rules["groups"] for r in g["rules"]]
    return out


async def test_every_dashboard_query_and_alert_rule_names_a_metric_the_bot_exposes(
    services, ssh_server, fake_hosts, scrape
):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train16", address=A, port=ssh_server.port, group="train")
    await check_fleet(services=services, names=["train16"], title="t", requested_by="test")
    exposed = _exposed(await scrape())
    queries = _queries()
    assert len(queries) >= 10
    used = set()
    for where, expr in queries:
        names = set(re.findall(r"\bgpubot_\w+", expr))
        assert names, f"{where} names no gpubot metric: {expr}"
        assert names <= exposed, f"{where} names {names - exposed}, which /metrics does not expose"
        used |= names
    # the dashboard covers the fleet table, per-GPU memory, disk and changes
    assert {
        "gpubot_host_verdict",
        "gpubot_gpu_memory_used_bytes",
        "gpubot_gpu_memory_total_bytes",
        "gpubot_host_disk_free_bytes",
    } <= used
    panels = {p["type"] for p in json.loads(DASHBOARD.read_text())["panels"]}
    assert {"table", "heatmap", "timeseries"} <= panels


def test_a_misspelt_metric_in_a_query_would_be_caught():
    exposed = {"gpubot_host_verdict"}
    assert set(re.findall(r"\bgpubot_\w+", 'gpubot_host_verdicts{verdict="ready"}')) - exposed == {
        "gpubot_host_verdicts"
    }
