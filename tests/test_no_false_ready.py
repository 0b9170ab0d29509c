"""Red team of the verdict: inputs where gpubot once said *ready* although a careful operator would
not, or said it from a witness that never answered. Each test is the situation, with the verdict it
must get (pure parsers and the ScriptedRunner twin: no sshd, no database)."""

from bot.probes.engine import run_probe
from bot.probes.script import ProbePlan
from bot.readiness.verdict import Requirements, Verdict, assess
from bot.ssh.scripted import ScriptedRunner
from bot.ssh.target import HostTarget
from tests.support.scripted import idle_h200, out, probe_batch

NODE = HostTarget("node174", "10.0.0.1")


async def _judge_batch(answers, *, exit_status=0, plan=None):
    res = await run_probe(target=NODE, plan=plan or ProbePlan(), runner=ScriptedRunner(probe_batch(answers, exit_status=exit_status)),
                          timeout=30)
    assert res.readings is not None and res.error_kind is None
    return assess(res.readings, Requirements())


# --- the batch's shell died on the host after the GPU, disk and unit probes -----------------------
async def test_a_complete_idle_batch_reads_ready():
    assert (await _judge_batch(idle_h200())).verdict is Verdict.READY


async def test_a_batch_whose_shell_was_killed_before_the_kernel_log_is_unknown_not_ready():
    """The OOM killer (or anything) ends the remote sh after the units: the SSH session closes
    normally with an exit signal, so the runner raises nothing. The inventory witnesses and the Xid
    check never answered: that is a batch cut short, never *ready*."""
    answers = {k: v for k, v in idle_h200().items() if k not in ("inventory", "owners", "kernel_log", "driver", "uptime", "hostname")}
    a = await _judge_batch(answers, exit_status=None)
    assert a.verdict is Verdict.UNKNOWN, a.reasons
    (cut,) = [r for r in a.reasons if r.code == "batch_cut"]
    assert "inventory" in cut.text and "kernel_log" in cut.text and "no exit status" in cut.text


async def test_a_batch_whose_last_frame_never_ended_is_unknown():
    a = await _judge_batch(idle_h200() | {"hostname": out("node1", exit_status=None)}, exit_status=137)
    assert a.verdict is Verdict.UNKNOWN and "hostname" in next(r.text for r in a.reasons if r.code == "batch_cut")
