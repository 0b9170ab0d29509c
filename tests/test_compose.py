"""docker-compose.yml and the Dockerfile name real settings (Docker cannot run here)."""

from pathlib import Path

import yaml

from bot.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def _env_names() -> set[str]:
    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names.update(getattr(alias, "choices", []) or [])
        names.add(f"GPUBOT_{name.upper()}")
    return names


def test_compose_bot_uses_only_real_settings_and_reaches_the_db():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
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
    assert f'{env["GPUBOT_HTTP_PORT"]}:' in bot["ports"][0]
    assert bot["depends_on"]["db"]["condition"] == "service_healthy"
    assert Settings(_env_file=None, **{"database_url": url}).database_url == url


def test_dockerfile_copies_what_the_app_needs():
    text = (ROOT / "Dockerfile").read_text()
    for part in ("bot", "migrations", "alembic.ini", "pyproject.toml"):
        assert f"COPY {part}" in text or f" {part} " in text or part in text.split("COPY", 2)[1]


def test_manifest_declares_the_command_and_interactivity():
    doc = yaml.safe_load((ROOT / "bot" / "slack" / "manifest.yaml").read_text())
    assert doc["features"]["slash_commands"][0]["command"] == Settings(_env_file=None).command
    assert doc["settings"]["interactivity"]["is_enabled"] is True
    assert {"commands", "chat:write"} <= set(doc["oauth_config"]["scopes"]["bot"])
