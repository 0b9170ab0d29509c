"""The partial dump: a batch whose deadline passes returns what it read, over real
SSH to a fake host of this module's own sshd whose ``df`` sleeps past the deadline
(tests/support/faults.py ``slow-df``).

* The client waits less than the host's deadline (a host too loaded to keep it; the runner tells the
  batch how long it waits, ``GPUBOT_LEFT_S``): at that time the batch's watcher sends the frames
  finished so far, so the GPU probe's readings arrive and are parsed; the host is *unknown*, its
  reason naming the probes that did not finish, never *unreachable*.
* The host's own deadline passes first: ``df`` is cut at the deadline and what comes after it is not
  run; the host is *unknown* naming them, the GPU readings kept, and the kernel log (started with the
  batch, beside the GPU probe) read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.flows.status.host import check_host
from tests.support import faults
from tests.support.sshd import SshTestServer

pytestmark = pytest.mark.sshd  # an sshd of its own

SLOW = "127.0.0.63"


@pytest.fixture(scope="module")
def slow_server() -> Iterator[SshTestServer]:
    with SshTestServer([SLOW]) as server:
        faults.install(server)
        faults.set_fault(server, SLOW, "slow-df")
        yield server


async def slow_host(services, server: SshTestServer, **settings):
    """``services`` trusting ``server``, with ``settings`` changed, and host ``slowpoke`` registered."""
    ssh = services.runner.ssh
    ssh.known_hosts, ssh.default_user, ssh.default_key_file = (
        server.known_hosts_path,
        server.username,
        server.client_key_path,
    )
    services = dataclasses.replace(services, settings=services.settings.updated(**settings))
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="slowpoke", address=SLOW, port=server.port)
    return services


def unfinished_named(report) -> str:
    return " ".join(r.text for r in report.answer.reasons)


async def test_the_client_giving_up_first_still_gets_the_frames_the_host_finished(services, slow_server):
    started = Path(slow_server.state_dir) / f"{SLOW}.slow-started"
    started.unlink(missing_ok=True)
    # The client waits 4 s (GPUBOT_LEFT_S 2); the host's own deadline is 5 s (its floor): df still sleeps.
    services = await slow_host(services, slow_server, batch_timeout_s=4.0)
    report = await check_host(services=services, host_name="slowpoke")
    assert started.exists()  # the batch reached df: the GPU probe before it had finished
    assert report.assessment.verdict is Verdict.UNKNOWN, report.assessment.reasons
    assert report.error and "slow" in report.error, report.error
    assert report.readings is not None and len(report.readings.gpu.gpus) == 8  # the finished probe, parsed
    assert report.readings.gpu.gpus[0].memory_total_mib == 143771
    [cut] = [r for r in report.assessment.reasons if r.code == "batch_cut"]
    assert cut.severity.value == "unknown" and "df.0" in cut.text and "unit." not in cut.text, cut.text
    assert "hostname" in cut.text and "gpus" not in cut.text.split(";")[-1], cut.text  # names what did not finish
    [disk] = report.readings.disks
    assert disk.size_bytes is None and "did not finish" in (disk.error or "")
    assert started.exists()


async def test_the_hosts_own_deadline_cuts_the_slow_probe_and_keeps_the_rest(services, slow_server):
    """The host's deadline is 5 s (batch 10 s less 5), the client waits 10 s; df (10 s per command)
    sleeps 30 s: cut at the deadline, the probes after it not run. Asked for free space (``need=``),
    the host is *unknown*; every probe that did not answer is named; the GPU readings are kept."""
    services = await slow_host(services, slow_server, batch_timeout_s=10.0)
    report = await check_host(services=services, host_name="slowpoke", need_bytes=1000)
    assert report.error is None, report.error  # the batch ended on the host, in time: not a client timeout
    assert report.answer.verdict is Verdict.UNKNOWN, report.answer.reasons
    assert report.readings is not None and len(report.readings.gpu.gpus) == 8  # what finished, parsed
    text = unfinished_named(report)
    assert "df did not answer within" in text, text
    assert "the batch deadline had passed" in text, text  # not run: named
    # The kernel log started with the batch, under its own limit: the slow df did not use its time.
    assert report.readings.kernel_log is not None and report.readings.kernel_log.source is not None
    assert "kernel log" not in text, text
