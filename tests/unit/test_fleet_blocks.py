"""Fleet summaries stay within Block Kit limits; what does not fit goes to the thread."""

import re
from datetime import UTC, datetime

import pytest

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict, unreachable
from bot.probing.probes.readings import Disk, Gpu, GpuProcess, GpuReport, HostContext, Readings
from bot.slack.blocks import MESSAGE_TEXT_BUDGET, block_text_length
from bot.slack.status.blocks import fleet_blocks
from bot.words.render.status_view import fleet_view
from tests.support.blockkit import blocks_text, validate_message

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def report(i: int) -> StatusReport:
    name = f"node{i:04d}"
    if i % 7 == 0:
        return StatusReport(
            name,
            "x",
            i,
            NOW,
            10,
            unreachable(f"{name}: cannot connect to 10.0.0.1:22: timed out " + "x" * 80, "unreachable"),
            None,
        )
    gpus = [Gpu(g, f"GPU-{i}-{g}", "NVIDIA H200", 143771, 0, 616, 0, 30, 100.0, "Disabled") for g in range(8)]
    procs = [GpuProcess(f"GPU-{i}-3", 4000 + i, 81920, "python3")] if i % 5 == 0 else []
    readings = Readings(
        GpuReport(gpus=gpus, processes=procs),
        [Disk("/", "/dev/sda", "/", 4 * 10**12, 10**12, 3 * 10**12)],
        [],
        None,
        [],
        HostContext(),
    )
    if procs:
        a = Assessment(
            Verdict.NOT_READY,
            [Reason("gpu_busy", f"GPU 3: 81,920 MiB used by python3 (pid {4000 + i})", Severity.BLOCKER)],
        )
    else:
        a = Assessment(Verdict.READY, [])
    return StatusReport(name, "x", i, NOW, 10, a, readings)


def test_small_fleet_fits_one_message():
    blocks, thread = fleet_blocks(fleet_view("group train", [report(i) for i in range(1, 41)]))
    validate_message(blocks)
    assert thread == []
    assert len(re.findall(r"node\d{4} · ", blocks_text(blocks))) == 40


def test_huge_fleet_keeps_summary_and_problems_and_threads_the_rest():
    reports = [report(i) for i in range(1, 3001)]
    blocks, thread = fleet_blocks(fleet_view("all hosts", reports))
    validate_message(blocks)
    text = blocks_text(blocks)
    assert "all hosts: 3000 hosts" in text and "in the thread" in text
    assert "node0007 · unreachable" in text  # problems come first
    assert thread and all(len(m) <= 50 for m in thread)
    for message in thread:
        validate_message(message)
    threaded = "".join(blocks_text(m) for m in thread)
    assert all(f"node{i:04d}" in threaded for i in (1, 1500, 3000))


@pytest.mark.parametrize("n", [250, 1000, 3000])
def test_every_message_stays_within_the_text_budget_and_each_host_is_threaded_once(n):
    """Each block within its limit was not enough: 1,000 hosts were 69,016 characters in one message,
    which Slack refuses (msg_blocks_too_long past about 13,200)."""
    view = fleet_view("all hosts", [report(i) for i in range(1, n + 1)])
    blocks, thread = fleet_blocks(view)
    assert block_text_length(blocks) <= MESSAGE_TEXT_BUDGET < 12_000
    text = blocks_text(blocks)
    problems = sum(1 for v, _ in view.lines if v is not Verdict.READY)
    shown = re.findall(r"node\d{4} · (unreachable|not ready|ready)", text)
    assert "ready" not in shown and f"_{problems - len(shown):,} more hosts with a problem" in text
    assert all(block_text_length(m) <= MESSAGE_TEXT_BUDGET and len(m) <= 46 for m in thread)
    threaded = re.findall(r"node\d{4}(?= · )", "\n".join(blocks_text(m) for m in thread))
    assert sorted(threaded) == [f"node{i:04d}" for i in range(1, n + 1)]
    assert blocks_text(thread[-1]).startswith(f"*all hosts: {n} hosts* ") and f"-{n:,} of {n:,}" in blocks_text(
        thread[-1]
    )
    smallest, same_thread = fleet_blocks(view, budget=0)  # the last retry: headline, counts, where the rest is
    assert (
        blocks_text(smallest).splitlines()[-1]
        == f"_{problems:,} hosts with a problem, and every host with details, in the thread._"
    )
    assert len(smallest) == 4 and same_thread == thread


def test_a_fan_out_cut_off_by_a_shutdown_names_the_hosts_and_how_to_probe_them_again():
    def cut(name: str, code: str, text: str) -> StatusReport:
        return StatusReport(
            name,
            "?",
            None,
            NOW,
            0,
            Assessment(Verdict.UNKNOWN, [Reason(code, f"{name}: {text}", Severity.UNKNOWN)]),
            None,
        )

    reports = [
        report(1),
        cut("node0002", "interrupted", "interrupted: the bot shut down before the probe finished"),
        *(
            cut(f"node{i:04d}", "shutting_down", "the bot is shutting down; the probe was not started")
            for i in range(3, 15)
        ),
    ]
    blocks, _ = fleet_blocks(fleet_view("group train", reports, rerun="/gpu status group:train"))
    validate_message(blocks)
    assert blocks[2]["text"]["text"] == (
        ":warning: The bot shut down during this check: 1 host was cut off (stored as interrupted: node0002) "
        "and 12 not "
        "probed (node0003, node0004, node0005, node0006, node0007, node0008, node0009, node0010, node0011, "
        "node0012 and "
        "2 more). Run `/gpu status group:train` again."
    )
    plain, _ = fleet_blocks(fleet_view("group train", [report(1), report(2)], rerun="/gpu status group:train"))
    assert "shut down" not in blocks_text(plain)
