

def test_a_string_where_a_list_belongs_is_named():
    import pytest

    from bot.actions.policy import PolicyError, _rule

    with pytest.raises(PolicyError, match=r'`kinds` is a list, e\.g\. \["clean"\]'):
        _rule({"kinds": "clean"}, 1)


def test_the_policy_is_checked_at_start_naming_the_variable(monkeypatch, capsys, tmp_path):
    import pytest

    from bot.actions.policy import PolicyError, check_policy
    from bot.cli import EX_CONFIG, main
    from bot.config import Settings

    def policy(rules):
        return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'p.db'}", approval_policy=rules)

    check_policy(policy([{"kinds": ["pivot"], "approvers": ["U1", "U2"], "approvals": 2}, {"approvers": ["S1"], "approvals": 3}]))
    for rules, said in (([{"kinds": ["nuke"]}], r"rule 1: unknown kinds \['nuke'\]"),
                        ([{"kinds": ["*"], "approvals": 0}], "rule 1: approvals must be at least 1"),
                        ([{}, {"approvals": 3, "approvers": ["UX"]}], "rule 2 needs 3 approvals but names only 1 approver: it could never be met")):
        with pytest.raises(PolicyError, match=f"GPUBOT_APPROVAL_POLICY {said}"):
            check_policy(policy(rules))
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    monkeypatch.setenv("GPUBOT_APPROVAL_POLICY", '[{"kinds": ["nuke"]}]')
    assert main(["hosts", "list"]) == EX_CONFIG
    assert "gpubot: configuration error: GPUBOT_APPROVAL_POLICY rule 1: unknown kinds ['nuke']" in capsys.readouterr().err
    assert not (tmp_path / "p.db").exists()  # stopped before anything else
