"""What the history and report charts are drawn from, over real sshd probes whose fake GPUs change
between probes (an orphan takes 30,000 MiB on GPU 3, then GPU 7 falls off the bus) and a kill from the
action tables, on SQLite and PostgreSQL: one line per GPU by its UUID, the lost GPU marked absent, the
verdict changes as the band, the action as a mark; the rendered PNG's pixels show them."""

import os
from datetime import datetime, timedelta

import numpy as np
from matplotlib.colors import to_rgb

from bot.domain.actions.models import ActionRequest
from bot.domain.history import chart_data
from bot.domain.history.chart_data import history_chart
from bot.domain.history.service import load_history
from bot.domain.hosts import service as hosts
from bot.flows.reports.flows import chart, chart_title
from bot.flows.status.host import check_host
from bot.foundation.db.base import utcnow
from bot.words.render.chart import LOST_COLOUR, MARK_COLOUR, VERDICT_COLOURS, chart_figure, draw
from tests.support.clock import ago
from tests.unit.test_chart_pixels import _box, _cols, _line_mask, _pixels, _plot_mask

ADDR = "127.0.0.17"  # one of the sshd fixture's addresses (its fake state is reset per test)


async def _probe(services, hours: float) -> None:
    await check_host(services=ago(services, hours=hours), host_name="chart1")


async def _kill_done(services, hours: float) -> tuple[int, datetime]:
    at = utcnow() - timedelta(hours=hours)
    async with services.sessions() as db, db.begin():
        row = ActionRequest(
            kind="kill",
            host="chart1",
            spec={},
            plan={},
            state="done",
            requester="U1",
            created_at=at,
            updated_at=at,
            expires_at=at,
        )
        db.add(row)
        await db.flush()
        return row.id, at


async def _story(services, fake_hosts) -> tuple[int, datetime]:
    """ready at -20 h; an orphan on GPU 3 at -12 h and -10 h (not ready); a kill at -9 h; ready at -8 h;
    GPU 7 gone at -4 h and -2 h (not ready). Returns the kill's id and the time stamped on it."""
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="chart1", address=ADDR, port=fake_hosts.server.port, probe={"units": {}})
    fake_hosts.update(ADDR, gpus=8)
    await _probe(services, 20)
    fake_hosts.update(ADDR, orphan_mib={3: 30_000})
    await _probe(services, 12)
    await _probe(services, 10)
    kill = await _kill_done(services, 9)
    fake_hosts.update(ADDR, orphan_mib={})
    await _probe(services, 8)
    fake_hosts.update(ADDR, gpus=7)
    await _probe(services, 4)
    await _probe(services, 2)
    return kill


async def test_the_history_chart_has_a_line_per_gpu_the_lost_one_marked_the_band_and_the_kill(services, fake_hosts):
    kill, killed_at = await _story(services, fake_hosts)
    until = utcnow()
    async with services.sessions() as db:
        h = await load_history(db_session=db, host_name="chart1", since=until - timedelta(days=1), until=until)
        series, marks = await history_chart(
            db_session=db, host_name="chart1", since=h.since, until=h.until, points=h.points
        )
    assert len(series.times) == 6
    assert [g.label for g in series.gpus] == [f"GPU {i}" for i in range(8)]
    gpu3, gpu7 = series.gpus[3], series.gpus[7]
    assert gpu3.used_mib == [0, 30_000, 30_000, 0, 0, 0] and gpu3.total_mib == 143_771
    assert gpu7.present == [True, True, True, True, False, False] and gpu7.missing_since == 4
    assert [v for _, v in series.verdicts] == ["ready", "not_ready", "ready", "not_ready"]
    assert [m.label for m in marks] == [f"kill #{kill}"]
    assert marks[0].at == killed_at  # the stamp as stored, not the time the story took

    fig = chart_figure("chart1: last 1 day", [series], since=h.since, until=h.until, marks=marks)
    gpu_ax, _, band = fig.axes
    assert "GPU 7 lost" in " ".join(t.get_text() for t in gpu_ax.get_legend().get_texts())
    img = _pixels(fig)
    left, right, top, bottom = _box(fig, gpu_ax)
    width = right - left
    orphan = _cols(
        _plot_mask(fig, gpu_ax, img, to_rgb("C3"))[: int((bottom - top) * 0.9)]
    )  # GPU 3, above the idle ones at 0
    assert orphan.size and abs(orphan.min() / width - 12 / 24) < 0.02 and abs(orphan.max() / width - 16 / 24) < 0.02
    lost = _cols(_line_mask(img, to_rgb(LOST_COLOUR), tol=60)[bottom - 6 : bottom - 1, left + 2 : right - 2])
    assert lost.size and lost.min() / width > 19.5 / 24
    mark = _cols(_line_mask(img, to_rgb(MARK_COLOUR), tol=30)[top + 60 : bottom, left:right])
    assert mark.size and abs(mark.mean() / width - 15 / 24) < 0.02
    if os.environ.get("GPUBOT_CHART_DIR"):  # to look at it
        fig.savefig(os.path.join(os.environ["GPUBOT_CHART_DIR"], f"history-{services.engine.dialect.name}.png"))
    bl, br, bt, bb = _box(fig, band)
    red = _cols(_line_mask(img, to_rgb(VERDICT_COLOURS["not_ready"]), tol=10)[bt:bb, bl:br])
    assert red.size and abs(red.min() / (br - bl) - 12 / 24) < 0.02


async def test_the_report_chart_names_its_hosts_and_draws_one_host_per_gpu(services, fake_hosts):
    await _story(services, fake_hosts)
    png = draw(await chart(services, ["chart1"], "Readiness report: group x", until=utcnow(), days=1))
    assert png.startswith(b"\x89PNG")
    if os.environ.get("GPUBOT_CHART_DIR"):
        with open(
            os.path.join(os.environ["GPUBOT_CHART_DIR"], f"report-{services.engine.dialect.name}.png"), "wb"
        ) as f:
            f.write(png)
    assert (
        chart_title("Readiness report: all hosts", ["a", "b"], 7) == "Readiness report: all hosts (a, b) — last 7 days"
    )
    many = [f"n{i:02}" for i in range(12)]
    assert (
        chart_title("Readiness report: all hosts", many, 1)
        == "Readiness report: all hosts (n00 … n11, 12 hosts) — last 1 day"
    )


def test_the_action_view_of_the_history_package_matches_the_action_table():
    """bot.domain.history reads action_requests through a lightweight table (layers): its columns exist, same types."""
    model = ActionRequest.__table__.c
    for col in chart_data._actions.c:
        assert col.name in model
    assert set(chart_data.KIND_WORDS) == {
        k.value for k in __import__("bot.flows.actions.kinds", fromlist=["ActionKind"]).ActionKind
    }
    assert np.all([s in {"done", "failed", "interrupted"} for s in chart_data.RAN_STATES])


def test_history_takes_a_need_for_the_charts_disk_line():
    from bot.words.commands.history import parse_history

    assert parse_history(["node1", "1d", "need=540G"]).need_bytes == 540 * 10**9
    assert parse_history(["node1"]).need_bytes is None
