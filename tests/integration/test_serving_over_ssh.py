"""*serving* over the real sshd hosts: a stand-in model server started through the approval flow
(fake systemctl + fake-unit: a real process holding GPU memory through the fake nvidia-smi and
answering /health) reads **serving: vllm-kimi.service (healthy)** in the action's result, the status
card, the fleet line, the stored snapshot and `diff`; asked with `need=` the answer is busy, the record serving."""

from datetime import timedelta

from sqlalchemy import select

from bot.domain.history.service import diff_snapshots, load_history
from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Severity, Verdict
from bot.domain.snapshots.models import Snapshot
from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.status.fleet import check_fleet
from bot.flows.status.host import check_host
from bot.slack.status.blocks import fleet_blocks, status_blocks
from bot.words.render.history_view import history_view
from bot.words.render.status_view import fleet_view, status_view
from bot.words.render.text import status_text
from tests.actions_support import approve, fast, model_dir, register
from tests.support.blockkit import blocks_text, validate_message
from tests.support.fakestate import model_unit
from tests.support.sshd import free_port

KIMI = "vllm-kimi.service"
UNITS = {"vllm-glm5.service": "inactive", KIMI: "inactive"}


async def start_kimi(services, fake_hosts, name: str, addr: str, ssh_server, tmp_path, **probe) -> str:
    """Register ``name`` and start a stand-in vLLM for Kimi through a start request; its health URL."""
    fast(services, unit_health_wait_s=30.0)
    port = free_port()
    await register(services, name, addr, ssh_server, probe={"units": UNITS, **probe})
    fake_hosts.update(
        addr,
        units={
            "vllm-glm5.service": model_unit(),
            KIMI: model_unit(
                "/usr/bin/vllm",
                "serve",
                str(model_dir(tmp_path, "Kimi-K2.5-NVFP4")),
                "--tensor-parallel-size",
                "2",
                "--port",
                str(port),
                gpus={"0": 90000, "1": 90000},
            ),
        },
    )
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.START, name, unit=KIMI), requester="U1"
    )
    outcome = await approve(services, view.id, user="U1")
    assert outcome.view.state is State.DONE, outcome.view.message
    assert outcome.view.result_lines[-1].startswith(f"{name} now: serving: {KIMI} (healthy) · snapshot #")
    return f"http://127.0.0.1:{port}/health"


async def test_a_started_model_reads_serving_in_the_card_the_fleet_and_history(
    services, ssh_server, fake_hosts, tmp_path
):
    url = await start_kimi(services, fake_hosts, "node174", "127.0.0.17", ssh_server, tmp_path)
    report = await check_host(services=services, host_name="node174")
    a = report.assessment
    assert a.verdict is Verdict.SERVING and a.serving == (KIMI,), a.reasons
    (svc,) = [s for s in report.readings.services if s.name == KIMI]
    assert svc.healthy and svc.url == url and svc.url_source == "command"
    view = status_view(report, command="/gpu")
    assert view.headline == f"node174: serving: {KIMI} (healthy)"
    blocks = status_blocks(view)
    validate_message(blocks, view.headline)
    text = blocks_text(blocks)
    assert ":large_blue_circle: *serving: vllm-kimi.service (healthy)*" in text
    assert f"{KIMI} is serving on GPU 0, 1: {url} → 200 (its command line's server default)" in text
    assert "Next step" not in text and ":red_circle:" not in text and "not ready" not in text
    assert f"GPU 0: 90,000 MiB held by {KIMI}: vllm (pid {svc.main_pid})" in text  # a note, under Notes
    assert status_text(view).startswith(f"node174: serving: {KIMI} (healthy)\n")

    fleet = await check_fleet(services=services, names=["node174"], title="all hosts")
    fv = fleet_view("all hosts", fleet.reports)
    assert fv.counts == "0 ready · 1 serving · 0 unknown · 0 not ready · 0 unreachable"
    assert fv.lines == [
        (Verdict.SERVING, f"node174 · serving: {KIMI} (healthy) · 2/8 GPUs in use · {fv.lines[0][1].split(' · ')[3]}")
    ]
    fb, _ = fleet_blocks(fv)
    assert f":large_blue_circle: node174 · serving: {KIMI} (healthy)" in blocks_text(fb)

    async with services.sessions() as db:
        rows = (
            (await db.execute(select(Snapshot).where(Snapshot.host_name == "node174").order_by(Snapshot.id)))
            .scalars()
            .all()
        )
        assert [r.verdict for r in rows][-2:] == ["serving", "serving"]
        first = next(r for r in rows if r.verdict == "ready")  # the start's own plan probe, before it ran
        d = await diff_snapshots(
            db_session=db, host_name="node174", snapshot_id=first.id, now=services.clock() + timedelta(seconds=1)
        )
    assert d.lines[0] == f"verdict ready → serving: {KIMI} (healthy)"
    async with services.sessions() as db:  # the timeline names the unit too (it said only "ready → serving")
        h = await load_history(
            db_session=db,
            host_name="node174",
            since=first.taken_at - timedelta(minutes=1),
            until=services.clock() + timedelta(seconds=1),
        )
    lines = history_view(h).lines
    assert any(f"ready → serving: {KIMI} (healthy) · " in line for line in lines), lines
    assert f"now serving: {KIMI} (healthy) · " in lines[-1], lines


async def test_need_for_another_deployment_answers_busy_and_the_host_stays_serving(
    services, ssh_server, fake_hosts, tmp_path
):
    await start_kimi(services, fake_hosts, "node175", "127.0.0.18", ssh_server, tmp_path)
    report = await check_host(services=services, host_name="node175", need_bytes=10**9)
    assert report.assessment.verdict is Verdict.SERVING  # the host's own verdict, stored
    q = report.question
    assert q is not None and q.verdict is Verdict.NOT_READY and q.serving == (KIMI,)
    blockers = [r.text for r in q.reasons if r.severity is Severity.BLOCKER]
    assert f"busy: serving {KIMI} (healthy, GPU 0, 1)" in blockers
    text = status_text(status_view(report))
    assert text.startswith(f"node175: serving: {KIMI} (healthy)\n")
    assert f"not ready — busy: serving {KIMI} (healthy, GPU 0, 1)" in text
    assert "stop node175" not in text  # never advice to stop a healthy unit
    async with services.sessions() as db:
        row = await db.get(Snapshot, report.snapshot_id)
    assert row.verdict == "serving" and row.question["verdict"] == "not_ready"


async def test_a_unit_whose_health_url_does_not_answer_is_not_serving(services, ssh_server, fake_hosts, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/health"
    await start_kimi(services, fake_hosts, "node176", "127.0.0.19", ssh_server, tmp_path)
    # the host's own setting now names a URL nothing answers: the same URL a pivot would wait for
    async with services.sessions() as db, db.begin():
        (await hosts.get(db_session=db, name="node176")).probe = {"units": UNITS, "unit_health": {KIMI: {"url": dead}}}
    report = await check_host(services=services, host_name="node176")
    assert report.assessment.verdict is Verdict.NOT_READY and report.assessment.serving == ()
    (svc,) = [s for s in report.readings.services if s.name == KIMI]
    assert svc.url == dead and svc.url_source == "setting" and svc.http_code is None and dead in svc.error
    assert "serving" not in status_view(report).headline
