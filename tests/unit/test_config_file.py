"""Configuration that cannot fail open: a ``GPUBOT_*`` name that is no setting stops
every command (exit 78, naming it and the nearest setting), nothing is deletable by default, and
``gpubot.toml`` holds the structured settings (the environment and ``.env`` win over it)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.entry.cli import main
from bot.entry.cli.errors import EX_CONFIG
from bot.flows.actions.planner import no_roots_refusal
from bot.foundation.config import Settings, config_file, load_settings
from bot.foundation.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

TOML = """\
allowed_roots = { "*" = ["/shared/models"], "node174" = ["/data/weights"] }
units = { "vllm-glm5.service" = "inactive" }
background_probe_groups = { train = 300 }
approval_policy = [
  { kinds = ["pivot"], groups = ["train"], approvals = 2 },
]
probe_timeout_s = 30
"""


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No GPUBOT_* variable from the runner's environment, no .env, no XDG config file; cwd a fresh folder."""
    for name in list(os.environ):
        if name.upper().startswith("GPUBOT_") or name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def gpubot(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.upper().startswith("GPUBOT_") and not k.startswith("SLACK_")}
    full.update(PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(cwd / "xdg"), **env)
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], env=full, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_default_allows_deleting_nowhere(clean_env):
    assert load_settings().actions.allowed_roots == {}
    said = no_roots_refusal("node174", {})
    assert "nothing may be deleted on node174" in said and "GPUBOT_ALLOWED_ROOTS=" in said and "gpubot.toml" in said
    other = no_roots_refusal("node174", {"node9": ["/x"], "group:infer": ["/y"]})
    assert "no allowed roots cover node174" in other and "group:infer, node9" in other


def test_a_misspelt_variable_is_refused_with_the_nearest_setting(clean_env, monkeypatch):
    monkeypatch.setenv("GPUBOT_ALOWED_ROOTS", '{"*": ["/shared"]}')
    with pytest.raises(ConfigError) as caught:
        load_settings()
    said = str(caught.value)
    assert "GPUBOT_ALOWED_ROOTS (in the environment) is not a setting (did you mean GPUBOT_ALLOWED_ROOTS?)" in said


def test_every_unknown_name_is_named_with_where_it_is(clean_env, monkeypatch):
    (clean_env / ".env").write_text(
        "SLACK_BOT_TOKEN=xoxb-1\nPOSTGRES_PASSWORD=pw\nGPUBOT_PUBLISH=3000\nGPUBOT_UNIT=x\ngpubot_probe_timout_s=5\n"
    )
    monkeypatch.setenv("GPUBOT_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1/test")  # the suite's, not a setting
    monkeypatch.setenv("GPUBOT_ZZZZ", "1")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    said = str(caught.value)
    assert "GPUBOT_UNIT (in .env) is not a setting (did you mean GPUBOT_UNITS?)" in said
    assert "gpubot_probe_timout_s (in .env) is not a setting (did you mean GPUBOT_PROBE_TIMEOUT_S?)" in said
    assert "GPUBOT_ZZZZ (in the environment) is not a setting (the settings are listed in .env.example and " in said
    assert "docs/configuration.md)" in said
    for fine in ("POSTGRES_PASSWORD", "GPUBOT_PUBLISH", "GPUBOT_TEST_PG", "SLACK_BOT_TOKEN"):
        assert fine not in said


def test_the_config_file_holds_the_structured_settings_and_the_environment_wins(clean_env, monkeypatch):
    path = clean_env / "gpubot.toml"
    path.write_text(TOML)
    s = load_settings(str(path))
    assert s.actions.allowed_roots == {"*": ["/shared/models"], "node174": ["/data/weights"]}
    assert s.probes.units == {"vllm-glm5.service": "inactive"} and s.history.background_probe_groups == {"train": 300}
    assert s.actions.approval_policy == [{"kinds": ["pivot"], "groups": ["train"], "approvals": 2}]
    assert (
        s.probes.probe_timeout_s == 30 and "allowed_roots" in s.actions.model_fields_set
    )  # the console's demo stays off
    (clean_env / ".env").write_text("GPUBOT_PROBE_TIMEOUT_S=40\n")
    monkeypatch.setenv("GPUBOT_ALLOWED_ROOTS", '{"*": ["/models"]}')
    s = load_settings(str(path))
    assert (
        s.actions.allowed_roots == {"*": ["/models"]}
        and s.probes.probe_timeout_s == 40
        and s.probes.units == {"vllm-glm5.service": "inactive"}
    )
    assert Settings(_env_file=None).probes.units == {}  # a file is read only when loading names it


def test_the_config_file_is_found_by_gpubot_config_then_the_xdg_folder(clean_env, monkeypatch):
    assert config_file(None, os.environ) is None
    xdg = clean_env / "xdg" / "gpubot" / "gpubot.toml"
    xdg.parent.mkdir(parents=True)
    xdg.write_text('units = { "a.service" = "active" }\n')
    assert load_settings().probes.units == {"a.service": "active"}
    named = clean_env / "other.toml"
    named.write_text('units = { "b.service" = "active" }\n')
    monkeypatch.setenv("GPUBOT_CONFIG", str(named))
    assert load_settings().probes.units == {"b.service": "active"}
    assert load_settings(str(xdg)).probes.units == {"a.service": "active"}  # --config beats GPUBOT_CONFIG
    monkeypatch.setenv("GPUBOT_CONFIG", str(clean_env / "typo.toml"))
    with pytest.raises(ConfigError, match="GPUBOT_CONFIG names .*typo.toml, which is not a file"):
        load_settings()


def test_a_bad_config_file_is_refused_naming_the_file_and_the_key(clean_env):
    path = clean_env / "gpubot.toml"
    path.write_text('allowed_root = { "*" = ["/shared"] }\n')
    with pytest.raises(
        ConfigError, match=r"allowed_root \(in .*gpubot.toml\) is not a setting \(did you mean allowed_roots\?\)"
    ):
        load_settings(str(path))
    path.write_text('allowed_roots = { "*" = ["/shared"]\n')
    with pytest.raises(ConfigError, match=r"gpubot.toml is not valid TOML: .*line 1"):
        load_settings(str(path))


@pytest.mark.process
def test_every_command_exits_78_on_an_unknown_variable(tmp_path):
    """Every command but serve, which stays up and unready under a restart policy
    (tests/e2e/test_serve.py::test_serve_with_a_misspelt_setting_stays_up_unready_saying_why)."""
    env = {
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        "GPUBOT_ALOWED_ROOTS": '{"*": ["/shared"]}',
    }
    for command in (["hosts", "list"], ["status", "localhost"], ["worker"], ["db", "upgrade"]):
        res = gpubot(*command, env=env, cwd=tmp_path)
        assert res.returncode == 78, (command, res.stderr)
        assert (
            "GPUBOT_ALOWED_ROOTS (in the environment) is not a setting (did you mean GPUBOT_ALLOWED_ROOTS?)"
            in res.stderr
        )
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "g.db").exists()  # nothing ran, not even the migration


@pytest.mark.process
def test_roots_from_the_config_file_reach_a_command_and_a_bad_root_there_is_named(tmp_path):
    db = {"GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}"}
    (tmp_path / "gpubot.toml").write_text('allowed_roots = { "*" = ["/"] }\n')
    res = gpubot("--config", "gpubot.toml", "hosts", "list", env=db, cwd=tmp_path)
    assert res.returncode == 78 and "the root folder / cannot be an allowed root" in res.stderr, res.stderr
    (tmp_path / "gpubot.toml").write_text('allowed_roots = { "*" = ["/shared"] }\nunits = { "a.service" = "active" }\n')
    res = gpubot("--config", "gpubot.toml", "hosts", "list", env=db, cwd=tmp_path)
    assert res.returncode == 0, res.stderr


def test_an_empty_list_of_model_volumes_stops_at_start_with_exit_78(monkeypatch, capsys, tmp_path):
    """GPUBOT_MODEL_VOLUMES=[] was accepted: the probe read / anyway and need= had nothing to check."""
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'v.db'}")
    monkeypatch.setenv("GPUBOT_MODEL_VOLUMES", "[]")
    assert main(["hosts", "list"]) == EX_CONFIG
    assert (
        "gpubot: configuration error: GPUBOT_MODEL_VOLUMES: must name at least one folder whose free disk is read "
        '(the default is ["/"])'
    ) in capsys.readouterr().err
    assert not (tmp_path / "v.db").exists()  # stopped before anything else
    monkeypatch.setenv("GPUBOT_MODEL_VOLUMES", '["/shared"]')
    assert main(["hosts", "list"]) == 0


def test_a_gpubot_toml_in_the_working_folder_is_said_to_be_unread_unless_named(clean_env, capsys, monkeypatch):
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{clean_env / 'g.db'}")
    (clean_env / "gpubot.toml").write_text("probe_timeout_s = 30\n")
    (clean_env / "gpubot.toml").chmod(0o600)
    assert main(["hosts", "list"]) == 0
    err = capsys.readouterr().err
    assert f"{clean_env / 'gpubot.toml'} is not read" in err and "gpubot --config gpubot.toml" in err, err
    assert main(["--config", "gpubot.toml", "hosts", "list"]) == 0
    assert "is not read" not in capsys.readouterr().err


def test_a_bad_value_is_named_where_it_was_written(clean_env, monkeypatch):
    toml = clean_env / "gpubot.toml"
    toml.write_text('probe_timeout_s = "soon"\n')
    toml.chmod(0o600)
    with pytest.raises(ConfigError, match=rf"^probe_timeout_s \(in {toml}\): Input should be a valid integer"):
        load_settings(str(toml))
    (clean_env / ".env").write_text("GPUBOT_PROBE_TIMEOUT_S=later\n")
    with pytest.raises(ConfigError, match=r"^GPUBOT_PROBE_TIMEOUT_S \(in \.env\): Input should be a valid integer"):
        load_settings(str(toml))
    monkeypatch.setenv("GPUBOT_PROBE_TIMEOUT_S", "never")
    with pytest.raises(ConfigError, match=r"^GPUBOT_PROBE_TIMEOUT_S: Input should be a valid integer"):
        load_settings(str(toml))
