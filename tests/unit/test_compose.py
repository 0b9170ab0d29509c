"""docker-compose.yml, the Dockerfile, .env.example and the systemd unit name real settings and
agree with each other (tests/e2e/test_docker.py runs the image and the compose file on a real engine)."""

import os
from pathlib import Path

import pytest
import yaml

from bot.foundation.config import FIELDS, Settings

ROOT = Path(__file__).resolve().parents[2]


def _env_names() -> set[str]:
    names = set()
    for name, field in FIELDS.items():
        alias = field.validation_alias
        names.update(getattr(alias, "choices", []) or [])
        names.add(f"GPUBOT_{name.upper()}")
    return names


def interpolated(text: str, values: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}`` with ``values``."""
    import re

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if name in values:
            return values[name]
        assert op != ":?", f"compose needs {name}: {arg}"
        return arg

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, text)


def merged(base: dict, override: dict) -> dict:  # type: ignore[type-arg]
    """Compose's merge of an override file into a file, for the keys our files use (maps merge, the rest is
    replaced)."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def shipped(values: dict[str, str], *, with_db: bool = True) -> dict:  # type: ignore[type-arg]
    """The compose project a user gets: docker-compose.yml, plus docker-compose.override.yml unless left out."""
    doc = yaml.safe_load(interpolated((ROOT / "docker-compose.yml").read_text(), values))
    if with_db:
        doc = merged(doc, yaml.safe_load(interpolated((ROOT / "docker-compose.override.yml").read_text(), values)))
    return doc  # type: ignore[no-any-return]


def test_compose_bot_uses_only_real_settings_and_reaches_the_db():
    doc = shipped({"POSTGRES_PASSWORD": "pw"})
    bot, db = doc["services"]["bot"], doc["services"]["db"]
    env = bot["environment"]
    unknown = set(env) - _env_names()
    assert not unknown, f"compose sets variables gpubot does not read: {unknown}"
    url = env["GPUBOT_DATABASE_URL"]
    assert url.startswith("postgresql+asyncpg://")
    user, password = url.split("//")[1].split("@")[0].split(":")
    assert (user, password) == (db["environment"]["POSTGRES_USER"], db["environment"]["POSTGRES_PASSWORD"])
    assert url.rsplit("/", 1)[1] == db["environment"]["POSTGRES_DB"] and "@db:5432/" in url
    assert bot["command"] == ["gpubot", "serve"]
    assert bot["ports"][0].endswith(f":{env['GPUBOT_HTTP_PORT']}")
    assert bot["depends_on"]["db"]["condition"] == "service_healthy"
    assert Settings(_env_file=None, database_url=url).database.database_url == url
    # the key read-only, known_hosts in a writable volume (hosts trust renames a temp file there)
    key = next(v for v in bot["volumes"] if v.split(":")[1] == env["GPUBOT_SSH_KEY_FILE"])
    assert key.endswith(":ro")
    known = next(v for v in bot["volumes"] if v.split(":")[1] == str(Path(env["GPUBOT_KNOWN_HOSTS"]).parent))
    assert not known.endswith(":ro") and known.split(":")[0] in doc["volumes"]
    assert db["volumes"][0].split(":")[0] in doc["volumes"]
    assert int(bot["stop_grace_period"].rstrip("s")) > Settings(_env_file=None).service.shutdown_grace_s


def test_an_existing_postgresql_needs_no_edit_of_the_compose_files():
    """Without the override (COMPOSE_FILE=docker-compose.yml in .env) there is no `db`, nothing waits for it,
    no POSTGRES_PASSWORD is needed, and the bot's database URL is whatever .env says (env_file)."""
    doc = shipped({}, with_db=False)
    bot = doc["services"]["bot"]
    assert "db" not in doc["services"]
    assert "depends_on" not in bot and "GPUBOT_DATABASE_URL" not in bot["environment"]
    assert bot["env_file"] == [".env"]
    text = (ROOT / "docker-compose.yml").read_text()
    assert "${" not in text.replace("${GPUBOT_PUBLISH:-3000}", "").replace("${GPUBOT_IMAGE:-gpubot:latest}", "")


def test_env_example_lists_every_setting_and_nothing_else():
    names = set()
    for line in (ROOT / ".env.example").read_text().splitlines():
        line = line.lstrip("# ")
        if "=" in line and line.split("=", 1)[0].isupper() and line.split("=", 1)[0].replace("_", "").isalnum():
            names.add(line.split("=", 1)[0])
    settings = set()
    for name, field in FIELDS.items():
        alias = getattr(field.validation_alias, "choices", None)
        settings.add(alias[0] if alias else f"GPUBOT_{name.upper()}")
    assert settings <= names, f".env.example lacks {settings - names}"
    compose_only = {"POSTGRES_PASSWORD", "GPUBOT_PUBLISH", "COMPOSE_FILE", "GPUBOT_IMAGE", "POSTGRES_IMAGE"}
    assert names - settings <= compose_only, names - settings


def test_systemd_unit_is_valid_and_stops_gracefully():
    import configparser
    import shutil
    import subprocess

    text = (ROOT / "deploy" / "gpubot.service").read_text()
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(text)
    service = unit["Service"]
    assert service["ExecStart"].endswith("gpubot serve") and service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > Settings(_env_file=None).service.shutdown_grace_s
    if shutil.which("systemd-analyze") is None:
        return
    path = Path("/tmp") / f"gpubot-verify-{id(text)}.service"
    path.write_text(text.replace("/opt/gpubot/bin/gpubot serve", "/bin/true"))
    try:
        res = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    finally:
        path.unlink()
    problems = [line for line in (res.stdout + res.stderr).splitlines() if str(path.name) in line or "gpubot" in line]
    assert res.returncode == 0 and not problems, res.stdout + res.stderr


def test_dockerfile_copies_what_the_app_needs():
    text = (ROOT / "Dockerfile").read_text()
    for part in ("bot", "migrations", "alembic.ini", "pyproject.toml"):
        assert f"COPY {part}" in text or f" {part} " in text or part in text.split("COPY", 2)[1]


def test_manifest_declares_the_command_and_interactivity():
    doc = yaml.safe_load((ROOT / "bot" / "slack" / "manifest.yaml").read_text())
    assert doc["features"]["slash_commands"][0]["command"] == Settings(_env_file=None).slack.command
    assert doc["settings"]["interactivity"]["is_enabled"] is True
    assert {"commands", "chat:write"} <= set(doc["oauth_config"]["scopes"]["bot"])
    assert "users:read" not in doc["oauth_config"]["scopes"]["bot"]  # nothing calls users.info
    assert (
        doc["features"]["slash_commands"][0]["should_escape"] is True
    )  # bot/words/commands/normalize.py reads the IDs
    assert doc["features"]["app_home"]["messages_tab_enabled"] is True  # DMs to a schedule's creator can be read


@pytest.mark.process
def test_compose_1_29_accepts_the_files(tmp_path):
    """`docker-compose config` (Compose 1.29, installed by make deps-system) validates the files
    against the Compose specification, with the .env a user writes from .env.example: with the
    bundled `db`, then for an existing PostgreSQL (the two lines .env.example shows uncommented)."""
    import shutil
    import subprocess

    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (make deps-system installs it)")
    env = {k: v for k, v in os.environ.items() if k not in ("POSTGRES_PASSWORD", "COMPOSE_FILE", "GPUBOT_DATABASE_URL")}

    def config() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker-compose", "config"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
        )

    for name in ("docker-compose.yml", "docker-compose.override.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    example = (ROOT / ".env.example").read_text()
    (tmp_path / ".env").write_text(example)
    res = config()
    assert res.returncode == 0, res.stderr
    doc = yaml.safe_load(res.stdout)
    bot = doc["services"]["bot"]
    assert bot["environment"]["GPUBOT_DATABASE_URL"] == "postgresql+asyncpg://gpubot:change-me@db:5432/gpubot"
    assert bot["environment"]["SLACK_BOT_TOKEN"] == "xoxb-replace-me"  # env_file read
    assert (
        bot["depends_on"] == {"db": {"condition": "service_healthy"}}
        and doc["services"]["db"]["image"] == "postgres:16"
    )
    assert bot["stop_grace_period"] == "30s" and bot["ports"][0]["published"] == 3000

    external = example.replace("# COMPOSE_FILE=", "COMPOSE_FILE=").replace(
        "# GPUBOT_DATABASE_URL=postgresql+asyncpg://gpubot:PASSWORD@db.example.org",
        "GPUBOT_DATABASE_URL=postgresql+asyncpg://gpubot:PASSWORD@db.example.org",
    )
    assert external.count("\nCOMPOSE_FILE=") == 1 and external.count("\nGPUBOT_DATABASE_URL=") == 1
    (tmp_path / ".env").write_text(external.replace("POSTGRES_PASSWORD=change-me\n", ""))
    res = config()
    assert res.returncode == 0, res.stderr
    doc = yaml.safe_load(res.stdout)
    assert set(doc["services"]) == {"bot"} and "depends_on" not in doc["services"]["bot"]
    assert (
        doc["services"]["bot"]["environment"]["GPUBOT_DATABASE_URL"]
        == "postgresql+asyncpg://gpubot:PASSWORD@db.example.org:5432/gpubot"
    )

    (tmp_path / ".env").write_text(
        "SLACK_BOT_TOKEN=xoxb-x\n"
    )  # the bundled db without POSTGRES_PASSWORD: refused, named
    res = config()
    assert res.returncode != 0 and "set POSTGRES_PASSWORD in .env" in res.stderr


def test_make_run_installs_gpubot_without_the_test_and_docs_tools(tmp_path):
    """`make run` on a fresh checkout: a virtualenv with gpubot and its runtime dependencies only; `make test`
    adds the extras and sets up PostgreSQL first (`make -n`: what would run, nothing run)."""
    import subprocess

    def planned(target: str) -> list[str]:
        res = subprocess.run(
            ["make", "-n", f"VENV={tmp_path / 'venv'}", target], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stderr
        return res.stdout.splitlines()

    run = planned("run")
    installs = [line for line in run if " install " in line and "pip" in line and "--upgrade pip" not in line]
    assert installs == [f"{tmp_path / 'venv'}/bin/pip install -q -e ."], run
    assert any(line.endswith("gpubot db upgrade") for line in run)
    test = planned("test")
    assert f"{tmp_path / 'venv'}/bin/pip install -q -e '.[test,docs]'" in test
    assert test.index("tools/test-postgres.sh") < next(i for i, line in enumerate(test) if "pytest" in line)
