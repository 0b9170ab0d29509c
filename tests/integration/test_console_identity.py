"""`as NAME` in the console changes who is typing (session state), never the settings it was given."""

from dataclasses import replace

from bot.slack.console.demo import Demo
from bot.slack.console.session import CONSOLE_USER, Console, console_settings


def test_acting_as_alice_shares_your_role_without_changing_the_settings(services):
    given = console_settings(services.settings, role="operator")
    assert CONSOLE_USER in given.roles.operators and CONSOLE_USER not in services.settings.roles.operators
    before = given.model_dump()
    lines: list[str] = []
    console = Console(replace(services, settings=given), write=lines.append)
    assert console.who() == "UCONSOLE (operator)"
    console.act_as("alice")
    assert console.user_id == "UCONSOLEALICE" and console.who() == "UCONSOLEALICE (operator)"
    assert lines[-1].startswith("now acting as UCONSOLEALICE (operator)")
    console.act_as("me")
    assert console.user_id == CONSOLE_USER and console.who() == "UCONSOLE (operator)"
    assert given.model_dump() == before and "UCONSOLEALICE" not in given.roles.operators
    assert "UCONSOLEALICE" in console.services.settings.roles.operators  # alice keeps the role for a later `as alice`


def test_the_demo_root_is_allowed_on_a_copy(services, tmp_path):
    demo = Demo(str(tmp_path / "demo"), str(tmp_path / "demo" / "old-model"))
    allowed = demo.allowing(services.settings)
    assert (
        allowed.actions.allowed_roots["localhost"] == [demo.root]
        and "localhost" not in services.settings.actions.allowed_roots
    )


async def test_a_slack_id_granted_admin_in_the_database_is_no_admin_in_a_viewer_console(services):
    """The role_grants table (``/gpu roles grant``) makes U0ADMIN an admin in Slack; typed in a viewer's
    console it counts as a viewer: ``as`` proves nobody's identity."""
    from bot.domain.grants import service as access
    from bot.foundation.roles import Role

    async with services.sessions() as db, db.begin():
        await access.grant(db_session=db, subject="U0ADMIN", role=Role.ADMIN, granted_by="U0BOSS", now=services.clock())
    lines: list[str] = []
    console = Console(
        replace(
            services,
            settings=console_settings(services.settings.updated(viewers=["U0V"]), role="viewer"),
        ),
        write=lines.append,
    )
    await console.start()
    try:
        console.act_as("U0ADMIN")
        assert console.who() == "U0ADMIN (viewer)"
        await console.handle_line("hosts add node9 127.0.0.9")
        assert "`hosts add` is not open to you (needs the admin role)" in lines[-1], lines[-1]
        await console.handle_line("hosts")
        assert "node9" not in lines[-1]
    finally:
        await console.stop()


def test_a_rule_naming_approvers_is_met_only_by_identities_slack_proved():
    from bot.flows.actions.kinds import ActionKind
    from bot.flows.actions.policy import NAMED_NOT_PROVEN, Rule, may_approve, may_reject
    from bot.foundation.roles import Role

    named, anyone = Rule(approvers=("U0ALICE", "S0OPS")), Rule()
    ask = {"kind": ActionKind.CLEAN_WEIGHTS, "requester": "U0BOB", "role": Role.ADMIN}
    assert may_approve(named, user_id="U0ALICE", user_groups=set(), **ask) is None
    assert may_approve(named, user_id="U0ALICE", user_groups=set(), proven=False, **ask) == NAMED_NOT_PROVEN
    assert may_approve(named, user_id="U0CAROL", user_groups={"S0OPS"}, proven=False, **ask) == NAMED_NOT_PROVEN
    assert (
        may_reject(named, requester="U0BOB", user_id="U0ALICE", user_groups=set(), role=Role.ADMIN, proven=False)
        == NAMED_NOT_PROVEN
    )
    assert (
        may_reject(named, requester="U0BOB", user_id="U0BOB", user_groups=set(), role=Role.VIEWER, proven=False) is None
    )
    assert (
        may_approve(anyone, user_id="U0ALICE", user_groups=set(), proven=False, **ask) is None
    )  # no names: the role decides
