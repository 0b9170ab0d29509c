"""A serving unit's answer and speed, asked on demand (`/gpu check`, `gpubot check`), stored with the host's
snapshot: `diff` and `history` show the speed before and after a change, `/metrics` the last figures per unit."""

import json
import re
import time

import pytest
from prometheus_client import generate_latest

from bot.domain.history.service import diff_snapshots, load_history
from bot.domain.observability import answers as answer_metrics
from bot.flows.actions.answer_check import check_unit
from bot.flows.status.host import check_host
from bot.foundation.db.base import utcnow
from bot.foundation.errors import UsageError
from bot.probing.probes.answer import Outcome
from tests.actions_support import register
from tests.e2e.test_cli import gpubot
from tests.support.clock import ago
from tests.support.fakestate import model_unit, run_fake
from tests.support.sshd import free_port

ADDR = "127.0.0.11"
UNIT = "vllm-kimi.service"


def serve(fake_hosts, ssh_server, addr: str, port: int, **answer) -> None:
    """(Re)start the unit as a stand-in vLLM on ``port`` answering as ``answer`` says."""
    run_fake(ssh_server, addr, "systemctl", "stop", UNIT)
    fake_hosts.update(
        addr,
        units={UNIT: model_unit("/usr/bin/vllm", "serve", "/models/kimi", "--port", str(port), gpus={}, answer=answer)},
    )
    run_fake(ssh_server, addr, "systemctl", "start", UNIT)
    for _ in range(100):
        if fake_hosts.read(addr).units[UNIT].get("ActiveState") == "active":
            break
        time.sleep(0.05)
    time.sleep(0.5)  # its HTTP server


async def test_diff_and_history_show_the_answer_and_speed_before_and_after(services, ssh_server, fake_hosts):
    await register(services, "ans2", ADDR, ssh_server, probe={"units": {UNIT: "active"}})
    serve(fake_hosts, ssh_server, ADDR, free_port(), token_s=0.01)
    before = await check_host(services=ago(services, hours=2), host_name="ans2")
    fast = await check_unit(services=services, host="ans2", unit=UNIT, requested_by="U1")
    assert fast.verdict.outcome is Outcome.CORRECT and fast.snapshot_id == before.snapshot_id
    assert fast.text().startswith(f"{UNIT} on ans2 answers correctly: «1, 2, 3, 4, 5, 6, 7, 8, 9, 10» · first token ")

    serve(fake_hosts, ssh_server, ADDR, free_port(), text="zurück zurück ings", token_s=0.05)  # the bad quantisation
    after = await check_host(services=services, host_name="ans2")
    wrong = await check_unit(services=services, host="ans2", unit=UNIT, requested_by="U1")
    assert wrong.verdict.outcome is Outcome.WRONG and wrong.snapshot_id == after.snapshot_id

    async with services.sessions() as db:
        d = await diff_snapshots(db_session=db, host_name="ans2", snapshot_id=before.snapshot_id, now=utcnow())
        h = await load_history(db_session=db, host_name="ans2", since=utcnow().replace(year=2000), until=utcnow())
    (line,) = [x for x in d.lines if x.startswith(f"{UNIT}: ")]
    assert re.fullmatch(
        rf"{UNIT}: answers correctly: «1, 2, 3, 4, 5, 6, 7, 8, 9, 10» · first token \d+\.\d\d s · \d+ tok/s → "
        r"the model answers, but not correctly: «zurück zurück ings» · first token \d+\.\d\d s · \d+ tok/s",
        line,
    ), line
    said = [x for e in h.entries for x in e.details if x.startswith(UNIT)]
    assert said and said[-1].startswith(f"{UNIT} the model answers, but not correctly: «zurück zurück ings»")

    async with services.sessions() as db:
        answer_metrics.publish(await answer_metrics.read(db), now=services.clock())
    page = generate_latest().decode()
    assert f'gpubot_unit_answer_correct{{host="ans2",unit="{UNIT}"}} 0.0' in page
    speed = re.search(rf'gpubot_unit_answer_tokens_per_second{{host="ans2",unit="{UNIT}"}} ([0-9.]+)', page)
    assert speed and float(speed.group(1)) == wrong.verdict.tok_s
    assert f'gpubot_unit_answer_first_token_seconds{{host="ans2",unit="{UNIT}"}}' in page

    with pytest.raises(UsageError, match="not a watched unit on ans2"):
        await check_unit(services=services, host="ans2", unit="sshd.service", requested_by="U1")


async def test_gpu_check_in_slack_says_the_answer_and_its_figures(slack_bot, services, ssh_server, fake_hosts):
    await register(services, "ans3", "127.0.0.10", ssh_server, probe={"units": {UNIT: "active"}})
    serve(fake_hosts, ssh_server, "127.0.0.10", free_port(), token_s=0.01)
    await slack_bot.command(f"check ans3 {UNIT}")
    done = await slack_bot.recorder.wait_for(
        "chat.update", lambda c: "answers correctly" in c.body.get("text", ""), timeout=60
    )
    assert done.body["text"].startswith(f"{UNIT} on ans3 answers correctly: «1, 2, 3, 4, 5, 6, 7, 8, 9, 10» · first")
    assert re.search(r"· \d+ tok/s$", done.body["text"]), done.body["text"]


@pytest.mark.process
def test_gpubot_check_in_the_terminal(tmp_path, ssh_server, fake_hosts):
    env = {
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
    }
    probe = json.dumps({"units": {UNIT: "active"}})
    add = gpubot("hosts", "add", "ans4", "127.0.0.9", "--port", str(ssh_server.port), "--probe", probe, env=env)
    assert add.returncode == 0, add.stderr
    nothing = gpubot("check", "ans4", UNIT, "--json", env=env)  # no API there yet: nothing was asked
    assert nothing.returncode == 2, nothing.stderr
    assert json.loads(nothing.stdout)["outcome"] == "not_checked", nothing.stdout
    serve(fake_hosts, ssh_server, "127.0.0.9", free_port(), text="no idea")
    out = gpubot("check", "ans4", UNIT, "--json", env=env)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["outcome"] == "wrong" and doc["answer"] == "no idea" and doc["first_token_s"] is not None
