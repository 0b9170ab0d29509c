"""Migrations: the schema they build is the schema the models describe, and they go down again."""

from alembic import command

from bot.db.migrate import alembic_config, upgrade


def test_migrations_match_models_and_round_trip(database_url):
    cfg = alembic_config(database_url)
    upgrade(database_url)
    command.check(cfg)  # raises when autogenerate finds a difference between models and migrations
    command.downgrade(cfg, "base")
    command.upgrade(cfg, "head")
