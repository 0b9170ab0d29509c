def test_a_string_where_a_list_belongs_is_named():
    import pytest

    from bot.flows.actions.policy import _rule
    from bot.foundation.errors import PolicyError

    with pytest.raises(PolicyError, match=r'`kinds` is a list, e\.g\. \["clean"\]'):
        _rule({"kinds": "clean"}, 1)


def test_the_policy_is_checked_at_start_naming_the_variable(monkeypatch, capsys, tmp_path):
    import pytest

    from bot.entry.cli import main
    from bot.entry.cli.errors import EX_CONFIG
    from bot.flows.actions.policy import check_policy
    from bot.foundation.config import Settings
    from bot.foundation.errors import PolicyError

    def policy(rules):
        return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'p.db'}", approval_policy=rules)

    check_policy(
        policy(
            [{"kinds": ["pivot"], "approvers": ["U1", "U2"], "approvals": 2}, {"approvers": ["S1"], "approvals": 3}]
        ).actions
    )
    for rules, said in (
        ([{"kinds": ["nuke"]}], r"rule 1: unknown kinds \['nuke'\]"),
        ([{"kinds": ["*"], "approvals": 0}], "rule 1: approvals must be at least 1"),
        (
            [{}, {"approvals": 3, "approvers": ["UX"]}],
            "rule 2 needs 3 approvals but names only 1 approver: it could never be met",
        ),
    ):
        with pytest.raises(PolicyError, match=f"GPUBOT_APPROVAL_POLICY {said}"):
            check_policy(policy(rules).actions)
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    monkeypatch.setenv("GPUBOT_APPROVAL_POLICY", '[{"kinds": ["nuke"]}]')
    assert main(["hosts", "list"]) == EX_CONFIG
    assert (
        "gpubot: configuration error: GPUBOT_APPROVAL_POLICY rule 1: unknown kinds ['nuke']" in capsys.readouterr().err
    )
    assert not (tmp_path / "p.db").exists()  # stopped before anything else


def test_an_expiry_of_zero_or_less_stops_at_start_with_exit_78(monkeypatch, capsys, tmp_path):
    """GPUBOT_APPROVAL_EXPIRY_S=0 posted every card already expired; a rule's expiry_s of 0 was
    read as 'unset' and a negative one was taken."""
    import pytest

    from bot.entry.cli import main
    from bot.entry.cli.errors import EX_CONFIG
    from bot.flows.actions.policy import check_policy
    from bot.foundation.config import Settings
    from bot.foundation.errors import PolicyError

    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    for value in ("0", "-60"):
        monkeypatch.setenv("GPUBOT_APPROVAL_EXPIRY_S", value)
        assert main(["hosts", "list"]) == EX_CONFIG
        assert (
            "gpubot: configuration error: GPUBOT_APPROVAL_EXPIRY_S: Input should be greater than 0"
            in capsys.readouterr().err
        )
    monkeypatch.setenv("GPUBOT_APPROVAL_EXPIRY_S", "1")
    monkeypatch.setenv("GPUBOT_APPROVAL_POLICY", '[{"kinds": ["kill"], "expiry_s": 0}]')
    assert main(["hosts", "list"]) == EX_CONFIG
    assert (
        "GPUBOT_APPROVAL_POLICY rule 1: expiry_s must be more than 0 seconds, not 0 (its cards would be posted "
        "already expired)"
    ) in capsys.readouterr().err
    assert not (tmp_path / "p.db").exists()
    with pytest.raises(PolicyError, match="rule 2: expiry_s must be more than 0 seconds, not -5"):
        check_policy(
            Settings(
                database_url="sqlite+aiosqlite:///x.db", approval_policy=[{"expiry_s": 60}, {"expiry_s": -5}]
            ).actions
        )
