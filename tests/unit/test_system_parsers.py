"""df, du and systemctl parsing over captures and real runs of the real tools."""

import subprocess

from bot.probing.probes.disks import parse_df
from bot.probing.probes.folders import parse_du
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import FolderState
from bot.probing.probes.units import parse_unit
from tests.fixtures_h200 import captured


def run(cmd: list[str]) -> ProbeOutput:
    p = subprocess.run(cmd, capture_output=True, text=True, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    return ProbeOutput("x", p.stdout, p.stderr, p.returncode)


def test_df_bytes_from_a_real_run(tmp_path):
    disk = parse_df(str(tmp_path), run(["df", "-P", "-B1", "--", str(tmp_path)]))
    assert disk.error is None and disk.avail_bytes > 0 and disk.size_bytes >= disk.avail_bytes


def test_df_capture_in_kib_still_reads_last_row():
    # df -P without -B1 (1024-blocks) -- we only ask for -B1, but the row shape is the same.
    disk = parse_df("/", captured("df_P"))
    assert disk.mount == "/" and disk.filesystem == "/dev/vda"


def test_df_of_missing_path_is_an_error_not_zero():
    disk = parse_df("/no/such", run(["df", "-P", "-B1", "--", "/no/such"]))
    assert disk.avail_bytes is None and "No such file" in disk.error


def test_du_present_absent_and_capture(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"x" * 5000)
    f = parse_du(str(tmp_path), run(["du", "-sxb", "--", str(tmp_path)]))
    assert f.state is FolderState.PRESENT and f.size_bytes >= 5000
    assert parse_du("/no/such/dir", captured("du_missing")).state is FolderState.ABSENT
    assert parse_du("/srv/x", captured("du_site")).size_bytes == 1132961847


def test_du_partial_total_is_a_value_with_a_warning():
    out = ProbeOutput("du", "4096\t/shared\n", "du: cannot read directory '/shared/locked': Permission denied\n", 1)
    f = parse_du("/shared", out)
    assert f.state is FolderState.PARTIAL and f.size_bytes == 4096 and "Permission denied" in f.warning


def test_systemctl_show_and_missing_systemctl():
    u = parse_unit(
        "vllm.service", ProbeOutput("u", "MainPID=0\nLoadState=loaded\nActiveState=inactive\nSubState=dead\n", "", 0)
    )
    assert (u.active_state, u.sub_state, u.main_pid, u.load_state) == ("inactive", "dead", 0, "loaded")
    missing = parse_unit("vllm.service", captured("systemctl_isactive"))
    assert missing.active_state is None and "not available" in missing.error
