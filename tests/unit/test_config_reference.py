"""The configuration reference (docs/configuration.md, .env.example) is what tools/config_reference.py writes
from the settings' field docstrings, and every setting is in exactly one group."""

import importlib.util
from pathlib import Path

from bot.foundation.config import FIELDS, GROUPS, Settings

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "tools" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_what_the_generator_writes():
    generator = _generator()
    differ = generator.stale()
    assert differ == [], f"{', '.join(differ)} differ from the settings' docstrings: run {generator.COMMAND}"


def test_every_setting_is_documented_in_exactly_one_group():
    seen = [name for group in GROUPS.values() for name in group.model_fields]
    assert sorted(seen) == sorted(FIELDS) and len(seen) == len(set(seen))
    assert [name for name, field in FIELDS.items() if not (field.description or "").strip()] == []


def test_a_group_holds_the_values_the_settings_were_given():
    s = Settings(_env_file=None, ssh_user="ops", ssh_pool_max=7, allowed_roots={"*": ["/shared//models/"]})
    assert (s.ssh.ssh_user, s.ssh.ssh_pool_max) == ("ops", 7)
    assert s.actions.allowed_roots == {"*": ["/shared/models"]}
    s.ssh.ssh_user = "other"
    assert s.ssh.ssh_user == "other"
    for name, group in GROUPS.items():
        assert isinstance(getattr(s, name), group)


def test_a_stale_reference_names_the_command_that_rewrites_it(tmp_path, monkeypatch):
    generator = _generator()
    (tmp_path / "docs").mkdir()
    for path in generator.FILES:
        text = (ROOT / path).read_text()
        (tmp_path / path).write_text(text.replace("`GPUBOT_SSH_POOL_MAX`", "`GPUBOT_SSH_POOL_MAXIMUM`"))
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    assert generator.stale() == ["docs/configuration.md"]
    assert generator.main([]) == 1
    assert generator.main(["--write"]) == 0 and generator.stale() == []
