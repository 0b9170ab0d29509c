"""Frames: one round trip, markers carry exit statuses, noise outside frames is ignored."""

from hypothesis import given
from hypothesis import strategies as st

from bot.probing.probes.frames import split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.registry import build_script, probe_commands

M = "GPUBOT-abc"


def frame(name: str, out: str, err: str, rc: int) -> str:
    return f"{M} BEGIN {name}\n{out}\n{M} STDERR {name}\n{err}\n{M} END {name} {rc}\n"


def test_banner_and_rc_noise_outside_frames_is_ignored():
    text = (
        "Welcome to node174!\nLast login: never\n"
        + frame("gpus", "0, 0\n", "", 0)
        + "bye from .bashrc\n"
        + frame("df.0", "x", "oops\n", 1)
    )
    got = split_frames(text, M)
    assert got["gpus"].stdout == "0, 0\n" and got["gpus"].exit_status == 0
    assert got["df.0"].stdout == "x" and got["df.0"].stderr == "oops\n" and got["df.0"].exit_status == 1


def test_a_cut_batch_leaves_the_last_probe_without_status():
    text = frame("gpus", "ok", "", 0) + f"{M} BEGIN apps\npartial"
    got = split_frames(text, M)
    assert got["apps"].exit_status is None and got["gpus"].exit_status == 0


def test_marker_lookalikes_from_another_batch_do_not_count():
    text = frame("gpus", "GPUBOT-other BEGIN x\n", "", 0)
    assert list(split_frames(text, M)) == ["gpus"]


@given(
    st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=200),
    st.text(max_size=50),
    st.integers(0, 255),
)
def test_any_stdout_round_trips(out, err, rc):
    got = split_frames(frame("p", out, err, rc), M)["p"]
    assert (got.stdout, got.exit_status) == (out, rc)


def test_user_paths_are_quoted_in_the_script():
    plan = ProbePlan(folders=("/shared/x'; rm -rf / #",), units=("vllm.service",))
    cmds = dict(probe_commands(plan))
    assert cmds["du.0"] == "du -sxb -- '/shared/x'\"'\"'; rm -rf / #'"
    script = build_script(plan)
    assert "LC_ALL=C" in script and 'timeout -k 2 "$gpubot_t"' in script and plan.marker in script
    assert "gpubot_run du.0 '/shared/x'" not in script  # the command is quoted as a whole, once more


def test_only_a_frames_own_lines_cut_it():
    """A STDERR line missing (stdout runs to the next BEGIN), an END of another name or with no number,
    and a name repeated (the later frame counts) are read as they always were."""
    text = (
        f"{M} BEGIN a\nout-a\n{M} BEGIN b\nout-b\n{M} STDERR b\nerr\n{M} END a 0\n{M} END b x\n{M} END b 3\r\n"
        f"{M} BEGIN bad name\n" + frame("c", "1", "", 0) + frame("c", "2", "", 5)
    )
    got = split_frames(text, M)
    assert sorted(got) == ["a", "b", "c"]
    assert (got["a"].stdout, got["a"].stderr, got["a"].exit_status) == ("out-a", "", None)
    assert (got["b"].stderr, got["b"].exit_status) == (f"err\n{M} END a 0\n{M} END b x", 3)
    assert (got["c"].stdout, got["c"].exit_status) == ("2", 5)
