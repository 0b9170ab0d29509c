"""What ``make test-fast`` leaves out is what it says: the rules of tests/support/markers.py."""

import multiprocessing
import sys

import pytest

from tests.support.markers import MANY, MULTIPROCESSING, programs_started, starts_sshd

PY = sys.executable


def test_gpubot_a_python_module_docker_or_many_programs_make_a_process_test():
    assert programs_started([f"{PY} -m bot status localhost"])
    assert programs_started([f"{PY} -m bot status localhost --json | head -c 10"])  # through a shell
    assert programs_started([f"{PY} -m tests.support.report_instance url doomed 2026-01-01"])
    assert programs_started(["docker-compose config"]) and programs_started(["/usr/bin/docker run --rm x"])
    assert programs_started(["sh -c true"] * (MANY + 1)) == f"it starts {MANY + 1} programs"


def test_a_few_short_commands_keep_a_test_in_the_fast_loop():
    assert programs_started(["sh -c true"] * MANY) is None
    assert (
        programs_started([f"{PY} -S -c print(1)", "ssh-keygen -q -t ed25519 -f k", f"{PY} /tmp/nvml_script.py", ""])
        is None
    )


def test_an_sshd_is_seen_by_its_program_name():
    assert starts_sshd(["ssh-keygen -q -f k", "/usr/sbin/sshd -D -e -f /tmp/x/sshd_config"])
    assert not starts_sshd(["ssh -p 22 host", "ssh-keygen -lf -"])


def test_make_running_a_target_makes_a_process_test_and_make_n_does_not():
    assert programs_started(["make -s run VENV=venv"]) and programs_started(["/usr/bin/make image"])
    assert programs_started(["make -n run"]) is None and programs_started(["make -s -n run VENV=venv"]) is None


def test_a_process_started_by_multiprocessing_makes_a_process_test():
    assert programs_started([f"{MULTIPROCESSING} ForkProcess-1"]) == (
        "it starts a Python process with multiprocessing ('ForkProcess-1')"
    )


@pytest.mark.process
def test_a_multiprocessing_process_is_seen_as_it_starts():
    """Marked ``process``: the check fails it ("starts no program") unless the start was recorded."""
    proc = multiprocessing.get_context("fork").Process(target=int)
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
