"""The settings are their groups: ``settings.ssh.ssh_user`` is the way in, ``settings.ssh_user`` none. They are read
and named flat (``GPUBOT_SSH_USER``, the TOML key ``ssh_user``, the keyword ``Settings(ssh_user=...)``), and a copy
with some changed is :meth:`~bot.foundation.config.Settings.updated`."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from bot.foundation.config import FIELDS, GROUP_OF, GROUPS, Settings, SshSettings


def test_every_setting_is_in_exactly_one_group_and_no_group_is_named_as_a_setting() -> None:
    assert sorted(GROUP_OF) == sorted(FIELDS)
    assert sum(len(kind.model_fields) for kind in GROUPS.values()) == len(FIELDS)
    assert set(Settings.model_fields) == set(GROUPS) and not set(GROUPS) & set(FIELDS)


def test_a_setting_is_no_attribute_of_the_settings_and_they_are_no_group() -> None:
    settings = Settings(_env_file=None, ssh_user="ops")
    assert settings.ssh.ssh_user == "ops"
    with pytest.raises(AttributeError):
        settings.ssh_user  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ValueError, match="no field"):
        settings.ssh_user = "other"  # type: ignore[attr-defined]
    assert not any(isinstance(settings, kind) for kind in GROUPS.values())
    assert isinstance(settings.ssh, SshSettings)


def test_flat_keywords_and_variables_reach_their_groups_and_an_unknown_keyword_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("GPUBOT_PROBE_TIMEOUT_S", "41")
    settings = Settings(_env_file=None, operators=["U1"], allowed_roots={"*": ["/shared//models/"]})
    assert settings.roles.operators == ["U1"] and settings.probes.probe_timeout_s == 41
    assert settings.actions.allowed_roots == {"*": ["/shared/models"]}  # validated as the group declares
    assert settings.roles.model_fields_set == {"operators"} and "allowed_roots" in settings.actions.model_fields_set
    assert settings.ssh.model_fields_set == set()  # nothing given: every value is the group's default
    with pytest.raises(TypeError, match="no setting: sshuser"):
        Settings(_env_file=None, sshuser="ops")
    with pytest.raises(ValidationError):
        Settings(_env_file=None, ssh_pool_max="many")


def test_updated_sets_flat_names_on_a_copy_and_leaves_the_original_and_its_groups_alone() -> None:
    settings = Settings(_env_file=None, ssh_user="ops")
    copy = settings.updated(probe_timeout_s=2, operators=["U9"])
    assert (copy.probes.probe_timeout_s, copy.roles.operators, copy.ssh.ssh_user) == (2, ["U9"], "ops")
    assert (settings.probes.probe_timeout_s, settings.roles.operators) == (20, [])
    copy.ssh.ssh_user = "changed"  # every group is the copy's own
    assert settings.ssh.ssh_user == "ops"
    with pytest.raises(KeyError, match="not a setting: probe_timout_s"):
        settings.updated(probe_timout_s=2)


def test_model_copy_takes_groups_only() -> None:
    settings = Settings(_env_file=None)
    ssh = SshSettings(ssh_user="ops")
    assert settings.model_copy(update={"ssh": ssh}).ssh is ssh
    with pytest.raises(KeyError, match="probe_timeout_s"):
        settings.model_copy(update={"probe_timeout_s": 2})


def test_the_settings_travel_to_a_worker_process_whole() -> None:
    settings = Settings(_env_file=None, ssh_user="ops", operators=["U1"])
    back = pickle.loads(pickle.dumps(settings))
    assert back == settings and back.ssh.ssh_user == "ops" and back.roles.model_fields_set == {"operators"}
