"""The terminal CLI as a user runs it: clear errors and exit codes, never a traceback."""

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_ADMIN_URL, _pg

ROOT = Path(__file__).resolve().parents[2]


def gpubot(*args: str, env: dict | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    for k in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        full.pop(k, None)
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        env=full,
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=input,
        timeout=120,
    )


@pytest.fixture
def db_env(tmp_path):
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    return {"GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'sub' / 'dir' / 'g.db'}"}


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({"GPUBOT_UNITS": "not json"}, "GPUBOT_UNITS: not valid JSON"),
        ({"GPUBOT_WEIGHT_PATHS": "/shared/glm5"}, "GPUBOT_WEIGHT_PATHS: not valid JSON"),
        ({"GPUBOT_GPU_FREE_MIB": "abc"}, "GPUBOT_GPU_FREE_MIB"),
        ({"GPUBOT_GPU_BACKEND": "nvmll"}, "GPUBOT_GPU_BACKEND"),
        ({"GPUBOT_UNITS": '{"vllm.service": "runnning"}'}, 'GPUBOT_UNITS["vllm.service"]: Input should be'),
    ],
)
@pytest.mark.process
def test_bad_settings_exit_78_with_the_variable_named(env, expect, db_env):
    res = gpubot("status", "localhost", env={**db_env, **env})
    assert res.returncode == 78 and expect in res.stderr and "Traceback" not in res.stderr


@pytest.mark.process
def test_bad_json_in_dotenv_names_the_variable_and_the_file(db_env, tmp_path):
    (tmp_path / ".env").write_text("GPUBOT_UNITS={vllm.service: inactive}\n")
    res = subprocess.run(
        [sys.executable, "-m", "bot", "hosts", "list"],
        env={**os.environ, **db_env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 78 and "GPUBOT_UNITS (in .env): not valid JSON" in res.stderr, res.stderr


def test_settings_problems_name_slack_variables_by_their_own_names():
    from pydantic import ValidationError

    from bot.foundation.config import Settings, settings_problem

    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, slack_bot_token=["x"], ssh_pool_max=0)
    problem = settings_problem(caught.value)
    assert "SLACK_BOT_TOKEN: " in problem and "GPUBOT_SSH_POOL_MAX: " in problem and "GPUBOT_SLACK" not in problem


@pytest.mark.parametrize(
    ("roots", "why"),
    [
        ('{"localhost": ["/"]}', "the root folder / cannot be an allowed root"),
        ('{"*": ["relative"]}', "is not an absolute path"),
    ],
)
@pytest.mark.parametrize("command", [("hosts", "list"), ("console",)])
@pytest.mark.process
def test_allowed_roots_of_slash_or_relative_stop_every_command(roots, why, command, db_env):
    res = gpubot(*command, env={**db_env, "GPUBOT_ALLOWED_ROOTS": roots}, input="quit\n")
    assert res.returncode == 78 and "GPUBOT_ALLOWED_ROOTS" in res.stderr and why in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "Value error" not in res.stderr


@pytest.mark.process
def test_unusable_database_urls_are_named_not_tracebacks(tmp_path):
    bad = gpubot("status", "localhost", env={"GPUBOT_DATABASE_URL": "nonsense"})
    assert bad.returncode == 78 and "GPUBOT_DATABASE_URL" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "g.db").write_text("this is not a database")
    broken = gpubot("hosts", "list", env={"GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'ro' / 'g.db'}"})
    assert broken.returncode == 74 and "database error" in broken.stderr and "Traceback" not in broken.stderr


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("mysql://u:Xyzzy@h/x", "mysql:// is not supported; use sqlite+aiosqlite:///PATH or postgresql+asyncpg://"),
        ("sqlite:////tmp/x.db", "sqlite:// needs gpubot's async driver: write sqlite+aiosqlite:///PATH"),
        ("postgresql://u:Xyzzy@h/x", "postgresql:// needs gpubot's async driver: write postgresql+asyncpg://"),
    ],
)
@pytest.mark.process
def test_unsupported_database_drivers_are_configuration_errors(url, why):
    res = gpubot("hosts", "list", env={"GPUBOT_DATABASE_URL": url})
    assert res.returncode == 78 and f"GPUBOT_DATABASE_URL: {why}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "Xyzzy" not in res.stderr


@pytest.mark.process
def test_missing_default_data_folder_is_created_and_status_works(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GPUBOT_DATABASE_URL"}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    res = subprocess.run(
        [sys.executable, "-m", "bot", "status", "localhost", "--json"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode in (0, 1, 2) and '"verdict"' in res.stdout, res.stderr
    assert (tmp_path / "xdg" / "gpubot" / "gpubot.db").exists()


@pytest.mark.process
def test_configured_sqlite_path_in_a_missing_folder_is_refused_not_created(tmp_path):
    res = gpubot("hosts", "list", env={"GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'typo' / 'x.db'}"})
    assert res.returncode == 74 and "Traceback" not in res.stderr
    assert f"the folder {tmp_path / 'typo'} does not exist" in res.stderr and "GPUBOT_DATABASE_URL" in res.stderr, (
        res.stderr
    )
    assert not (tmp_path / "typo").exists()


@pytest.mark.process
def test_closed_pipe_is_quiet(db_env):
    proc = subprocess.Popen(
        f"{sys.executable} -m bot status localhost --json | head -c 10",
        shell=True,
        cwd=ROOT,
        env={**os.environ, **db_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert len(out) == 10 and "Traceback" not in err


@pytest.mark.process
def test_concurrent_first_runs_on_sqlite_lose_nothing(db_env):
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bot", "hosts", "add", f"h{i}", f"10.0.0.{i + 1}"],
            cwd=ROOT,
            env={**os.environ, **db_env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), results
    listed = gpubot("hosts", "list", env=db_env).stdout
    assert all(f"h{i} " in listed for i in range(6))


@pytest.mark.postgres
@pytest.mark.process
def test_concurrent_first_runs_on_postgresql_lose_nothing():
    name = f"gpubot_cli_race_{secrets.token_hex(4)}"  # unique: other test runs may share this server
    asyncio.run(_pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    asyncio.run(_pg(f"CREATE DATABASE {name}"))
    env = {"GPUBOT_DATABASE_URL": PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"}
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bot", "hosts", "add", f"h{i}", f"10.0.0.{i + 1}"],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(5)
        ]
        results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
        assert all(rc == 0 for _, _, rc in results), results
    finally:
        asyncio.run(_pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.mark.process
def test_hosts_trust_in_the_terminal(db_env, tmp_path, ssh_server, fake_hosts):
    known = ssh_server.write_known_hosts(str(tmp_path / "kh"), {"127.0.0.18": "absent"})
    env = {
        **db_env,
        "GPUBOT_KNOWN_HOSTS": known,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
    }
    assert gpubot("hosts", "add", "box", "127.0.0.18", "--port", str(ssh_server.port), env=env).returncode == 0
    assert gpubot("status", "box", env=env).returncode == 2
    os.chmod(known, 0o666)
    ask = gpubot("hosts", "trust", "box", env=env)
    assert ask.returncode == 64 and "--fingerprint" in ask.stderr
    assert f"gpubot: warning: {known} is writable by group and others (mode 0666)" in ask.stderr, ask.stderr
    fingerprint = next(w for w in ask.stdout.split() if w.startswith("SHA256:"))
    assert f"then confirm it with `gpubot hosts trust box --fingerprint {fingerprint}`" in ask.stderr, ask.stderr
    wrong = gpubot("hosts", "trust", "box", "--fingerprint", "SHA256:not-it", env=env)
    assert wrong.returncode == 64 and "nothing recorded" in wrong.stderr
    assert f"box offers {fingerprint}, not the SHA256:not-it you gave" in wrong.stderr, (
        wrong.stderr
    )  # a typo, not a change
    assert "now offers" not in wrong.stderr
    ok = gpubot(
        "hosts", "trust", "box", "--fingerprint", fingerprint.removeprefix("SHA256:"), env=env
    )  # as typed from ssh-keygen's tail
    assert ok.returncode == 0 and "recorded" in ok.stdout
    assert os.stat(known).st_mode & 0o777 == 0o644
    assert gpubot("status", "box", env=env).returncode == 0


@pytest.mark.process
def test_trusting_a_host_by_its_dns_name_keeps_the_line_of_the_host_registered_by_its_address(
    db_env, tmp_path, ssh_server, fake_hosts
):
    known = tmp_path / "kh"
    (mine,) = [x for x in ssh_server.known_hosts_lines() if x.startswith("[127.0.0.1]:")]
    known.write_text(mine + "\n")
    known.chmod(0o600)
    env = {
        **db_env,
        "GPUBOT_KNOWN_HOSTS": str(known),
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
    }
    port = str(ssh_server.port)
    assert gpubot("hosts", "add", "ip174", "127.0.0.1", "--port", port, env=env).returncode == 0
    assert gpubot("hosts", "add", "dns174", "localhost", "--port", port, env=env).returncode == 0
    assert gpubot("status", "ip174", env=env).returncode == 0
    ask = gpubot("hosts", "trust", "dns174", env=env)
    fingerprint = next(w for w in ask.stdout.split() if w.startswith("SHA256:"))
    ok = gpubot("hosts", "trust", "dns174", "--fingerprint", fingerprint, env=env)
    assert ok.returncode == 0, ok.stderr
    lines = known.read_text().splitlines()
    assert mine in lines and any(x.startswith(f"[localhost]:{port} ") for x in lines), lines
    assert gpubot("status", "ip174", env=env).returncode == 0  # still reachable: its line was not removed
    assert gpubot("status", "dns174", env=env).returncode == 0


@pytest.mark.process
def test_out_of_range_limits_are_usage_errors_naming_the_flag(db_env):
    for bad in ("0", "-1"):
        res = gpubot("audit", "--limit", bad, env=db_env)
        assert res.returncode == 64 and f"argument --limit: must be at least 1, not {bad}" in res.stderr, res.stderr
    res = gpubot("audit", "--limit", "many", env=db_env)
    assert res.returncode == 64 and "`many` is not a whole number" in res.stderr


@pytest.mark.parametrize(
    "command", [("audit", "nosuch"), ("history", "nosuch"), ("diff", "nosuch"), ("audit", "localhst")]
)
@pytest.mark.process
def test_unknown_hosts_are_not_found_in_audit_history_and_diff(command, db_env):
    res = gpubot(*command, env=db_env)
    assert res.returncode == 69 and f"no host called `{command[1]}`" in res.stderr, res.stderr
    if command[1] == "localhst":
        assert "Did you mean: localhost?" in res.stderr


@pytest.mark.process
def test_diff_of_a_young_host_exits_66_with_a_hint_in_terminal_syntax(db_env, ssh_server, fake_hosts):
    """It exited 69 ("host not registered") and said `since=…` and `/gpu status`, which a terminal does not take."""
    env = {
        **db_env,
        "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
    }
    assert gpubot("hosts", "add", "young", "127.0.0.19", "--port", str(ssh_server.port), env=env).returncode == 0
    res = gpubot("diff", "young", env=env)
    assert res.returncode == 66 and "`young` has never been probed" in res.stderr, res.stderr
    assert "probe it with `gpubot status young`" in res.stderr and "/gpu" not in res.stderr
    assert gpubot("status", "young", env=env).returncode == 0
    res = gpubot("diff", "young", "--since", "1d", env=env)
    assert res.returncode == 66 and "its only one: there is nothing to compare yet" in res.stderr, res.stderr
    assert gpubot("status", "young", env=env).returncode == 0
    res = gpubot("diff", "young", "--since", "1d", env=env)
    first = re.search(r"try `--since (\d+)`", res.stderr)
    assert res.returncode == 66 and first and "since=" not in res.stderr and "/gpu" not in res.stderr, res.stderr
    res = gpubot("diff", "young", "--since", first.group(1), env=env)  # the hint works as written
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.process
def test_a_process_name_with_escape_sequences_is_shown_not_obeyed(db_env, ssh_server, fake_hosts):
    from tests.support.holders import hold_gpu, reap

    env = {
        **db_env,
        "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
    }
    assert gpubot("hosts", "add", "box", "127.0.0.19", "--port", str(ssh_server.port), env=env).returncode == 0
    proc = hold_gpu(ssh_server, "127.0.0.19", gpu=1, used_mib=4096, name="\x1b]0;pwn\x07\x1b[2J")
    try:
        res = gpubot("status", "box", env=env)
    finally:
        reap(proc)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout
    assert "\\x1b]0;pwn\\x07\\x1b[2J" in res.stdout, res.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "gpubot: error: name a command: db, hosts, status,"),
        (("hosts",), "gpubot hosts: error: name a command: add, edit, list,"),
        (("stauts", "n1"), "unknown command `stauts` (did you mean `gpubot status`?)"),
        (("hosts", "ad"), "unknown command `ad` (did you mean `gpubot hosts add`?)"),
        (
            ("hosts", "add", "n2", "1.2.3.4", "--probe", "{bad"),
            "argument --probe: not valid JSON (Expecting property name",
        ),
        (("hosts", "add", "n2", "1.2.3.4", "--probe", "[1]"), "argument --probe: give a JSON object"),
        (("status", "n1", "relative/path"), "weight paths must be absolute: `relative/path`"),
        (("hosts", "add", "node174", "10.0.0.999"), "`10.0.0.999` is not a valid IPv4 address (999 is over 255)"),
    ],
)
@pytest.mark.process
def test_usage_errors_say_what_to_type_not_argparse_internals(args, said, db_env):
    res = gpubot(*args, env=db_env)
    assert res.returncode == 64 and said in res.stderr, res.stderr
    for internal in ("required: cmd", "hosts_cmd", "invalid loads", "invalid choice", "Traceback"):
        assert internal not in res.stderr


@pytest.mark.process
def test_hosts_add_takes_labels_and_hosts_list_a_group_as_chat_does(db_env, tmp_path):
    typed = ("hosts", "add", "n2", "10.0.0.2", "--group", "train", "--labels", "rack:a3,owner:ml", "--key-file")
    mistyped = gpubot(*typed, "/nonexistent/key", env=db_env)
    assert mistyped.returncode == 64, mistyped.stderr
    assert (
        "the key file /nonexistent/key does not exist here" in mistyped.stderr and "nothing changed" in mistyped.stderr
    )
    assert "n2 " not in gpubot("hosts", "list", env=db_env).stdout
    key = tmp_path / "id_n2"
    key.write_text("a key\n")
    key.chmod(0o600)
    add = gpubot(*typed, str(key), env=db_env)
    assert add.returncode == 0 and "added n2" in add.stdout, add.stderr
    assert gpubot("hosts", "add", "n3", "10.0.0.3", env=db_env).returncode == 0
    listed = gpubot("hosts", "list", "--group", "train", env=db_env)
    assert listed.returncode == 0 and "n2 " in listed.stdout and "labels=rack:a3,owner:ml" in listed.stdout
    assert "n3 " not in listed.stdout
    typo = gpubot("hosts", "list", "--group", "trian", env=db_env)
    assert typo.returncode == 69 and "no host in group `trian`. Did you mean: train?" in typo.stderr, typo.stderr
    bad = gpubot("hosts", "add", "n4", "10.0.0.4", "--labels", "rack", env=db_env)
    assert bad.returncode == 64 and "label `rack` is not `key:value`" in bad.stderr


@pytest.mark.process
def test_forget_gpu_in_the_terminal_leaves_a_gpu_that_is_present(db_env, ssh_server, fake_hosts):
    """The terminal's forget-gpu follows chat's rule (one function): a GPU the latest probe lists stays."""
    env = {
        **db_env,
        "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
    }
    assert gpubot("hosts", "add", "box", "127.0.0.20", "--port", str(ssh_server.port), env=env).returncode == 0
    assert gpubot("status", "box", env=env).returncode == 0
    present = gpubot("hosts", "forget-gpu", "box", "7", env=env)
    assert present.returncode == 1 and "GPU 7 is present now (snapshot #1); nothing to forget." in present.stderr, (
        present.stderr
    )
    every = gpubot("hosts", "forget-gpu", "box", "all", env=env)
    assert every.returncode == 1 and "every GPU box has shown is present now" in every.stderr, every.stderr
    assert "GPU inventory (8):" in gpubot("hosts", "show", "box", env=env).stdout
    fake_hosts.update("127.0.0.20", gpus=6)  # GPUs 6 and 7 fall off the bus
    assert gpubot("status", "box", env=env).returncode == 1
    done = gpubot("hosts", "forget-gpu", "box", "all", env=env)
    assert done.returncode == 0 and done.stdout.count("`GPU-") == 2, done.stdout + done.stderr
    assert "GPUs 0, 1, 2, 3, 4, 5, present now, stay." in done.stdout
    assert "GPU inventory (6):" in gpubot("hosts", "show", "box", env=env).stdout
    assert gpubot("hosts", "forget-gpu", "box", "9", env=env).returncode == 64


@pytest.mark.process
def test_hosts_show_and_forget_gpu_take_the_built_in_localhost(db_env):
    """Chat showed `localhost`; the terminal answered "no host called `localhost`" (69)."""
    shown = gpubot("hosts", "show", "localhost", env=db_env)
    assert shown.returncode == 0, shown.stderr
    assert "localhost  local · this machine, built in" in shown.stdout and "never probed" in shown.stdout, shown.stdout
    doc = json.loads(gpubot("hosts", "show", "LocalHost", "--json", env=db_env).stdout)
    assert (
        doc["host"]["name"] == "localhost" and doc["host"]["built_in"] is True and doc["host"]["transport"] == "local"
    )
    assert doc["last_snapshot"] is None and doc["gpus"] == []
    forget = gpubot("hosts", "forget-gpu", "localhost", "7", env=db_env)
    assert forget.returncode in (1, 64) and "no host called" not in forget.stderr, forget.stderr
    assert gpubot("hosts", "show", "localhst", env=db_env).returncode == 69


@pytest.mark.process
def test_hosts_sudoers_of_an_unreachable_host_warns_on_stderr_and_exits_69(db_env, tmp_path):
    """Without its `delete` rules (only comments say why) the file is incomplete: stderr says so and the exit
    status is 69, so a script piping it to /etc/sudoers.d does not take the half file."""
    env = {
        **db_env,
        "GPUBOT_ALLOWED_ROOTS": '{"*": ["/shared/models"]}',
        "GPUBOT_SSH_CONNECT_TIMEOUT_S": "5",
        "GPUBOT_KNOWN_HOSTS": str(tmp_path / "kh"),
    }
    assert (
        gpubot("hosts", "add", "far", "127.0.0.1", "--port", "1", env=env).returncode == 0
    )  # nothing listens on port 1
    res = gpubot("hosts", "sudoers", "far", env=env)
    assert res.returncode == 69 and "NOPASSWD:" in res.stdout, res.stdout + res.stderr
    assert "delete /shared/models *" not in res.stdout and "# No `delete` rule for /shared/models" in res.stdout
    assert res.stderr.startswith("gpubot: warning: far could not be asked who controls /shared/models ("), res.stderr
    assert "print it again once the host answers" in res.stderr


@pytest.mark.process
def test_an_ssh_config_that_runs_commands_here_stops_every_command_naming_file_and_line(db_env, tmp_path):
    config = tmp_path / "ssh_config"
    canary = tmp_path / "canary"
    config.write_text(f"Host bastion\n  HostName 10.0.0.1\n  ProxyCommand sh -c 'touch {canary}'\n")
    refused = gpubot("hosts", "list", env={**db_env, "GPUBOT_SSH_CONFIG": str(config)})
    assert refused.returncode == 78, refused.stderr
    assert (
        f"configuration error: the ssh_config file {config} is refused: {config} line 3: ProxyCommand runs a program"
        in refused.stderr
    )
    assert "GPUBOT_SSH_CONFIG_ALLOW_COMMANDS=true" in refused.stderr and not canary.exists()
    allowed = gpubot(
        "hosts", "list", env={**db_env, "GPUBOT_SSH_CONFIG": str(config), "GPUBOT_SSH_CONFIG_ALLOW_COMMANDS": "true"}
    )
    assert allowed.returncode == 0, allowed.stderr
    assert gpubot("hosts", "list", env={**db_env, "GPUBOT_SSH_CONFIG": "none"}).returncode == 0


@pytest.mark.process
def test_a_question_with_no_reason_of_its_own_points_at_the_hosts(db_env, tmp_path):
    """`gpubot status localhost /some/path` on a host with reasons of its own: the path adds none, and the
    answer read "unknown — and the host's own reasons below", an "and" after nothing."""
    env = {
        **db_env,
        "GPUBOT_UNITS": '{"gpubot-test-absent.service": "active"}',
        "GPUBOT_MODEL_VOLUMES": f'["{tmp_path}"]',
    }
    res = gpubot("status", "localhost", str(tmp_path / "absent"), env=env)
    lines = res.stdout.splitlines()
    answer = lines[lines.index(f"For {tmp_path / 'absent'}:") + 1].strip()
    assert re.fullmatch(r"(not ready|unknown) — for the host's own reasons below", answer), res.stdout


@pytest.mark.process
def test_status_without_a_target_says_what_to_name():
    """`gpubot status` alone answered "the following arguments are required: ARG"."""
    res = gpubot("status")
    assert res.returncode == 64, res.stderr
    assert "usage: gpubot status [-h] [--json] HOST|group:NAME|all [need=SIZE] [PATH ...]" in res.stderr, res.stderr
    assert res.stderr.rstrip().endswith("the following arguments are required: HOST"), res.stderr
