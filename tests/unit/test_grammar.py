"""The /gpu grammar: every command, Slack's text shapes, "did you mean", and no crash on any text."""

import contextlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.foundation.errors import UsageError
from bot.foundation.roles import Role
from bot.slack.routes import command_grammar
from bot.words.commands.grammar import Grammar
from bot.words.commands.help import HelpCommand
from bot.words.commands.hosts import HostsAdd, HostsList, HostsRemove, HostsShow, HostsTrust
from bot.words.commands.normalize import normalize
from bot.words.commands.status import StatusCommand, Target

G = command_grammar()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("status node174", StatusCommand(Target("host", "node174"))),
        ("  STATUS   node174  need=540G ", StatusCommand(Target("host", "node174"), 540_000_000_000)),
        (
            "status node174 need=200GiB /shared/glm5 /models/x",
            StatusCommand(Target("host", "node174"), 200 * 2**30, ("/shared/glm5", "/models/x")),
        ),
        ("status group:train", StatusCommand(Target("group", "train"))),
        ("status all need=1T", StatusCommand(Target("all"), 10**12)),
        # a size as prose writes it, and as the refusal of incomplete weights suggests it
        ("status node174 need=86.22 GB", StatusCommand(Target("host", "node174"), 86_220_000_000)),
        ("status node174 need=86.22GB", StatusCommand(Target("host", "node174"), 86_220_000_000)),
        ("status node174 need=2 TiB /models/x", StatusCommand(Target("host", "node174"), 2 * 2**40, ("/models/x",))),
        ("status", StatusCommand(Target("default"))),
        ("status <http://node174|node174>", StatusCommand(Target("host", "node174"))),
        ("status <http://node174>", StatusCommand(Target("host", "node174"))),
        ("status node174 NEED=1g", StatusCommand(Target("host", "node174"), 10**9)),
        ("hosts", HostsList()),
        ("hosts group=train", HostsList("train")),
        ("hosts show node174", HostsShow("node174")),
        (
            "hosts add node174 10.1.2.3 port=2222 user=ops group=train labels=gpu:h200,rack:3",
            HostsAdd("node174", "10.1.2.3", 2222, "ops", "train", {"gpu": "h200", "rack": "3"}),
        ),
        ("hosts add node9 gpu9.lab.example", HostsAdd("node9", "gpu9.lab.example")),
        ("hosts remove node174", HostsRemove("node174")),
        ("Hosts Trust node174", HostsTrust("node174")),
        ("help", HelpCommand()),
        ("", HelpCommand()),
        ("help status", HelpCommand("status")),
        ("help Hosts add", HelpCommand("hosts add")),
    ],
)
def test_commands_parse(text, expected):
    assert G.parse(text).command == expected


@pytest.mark.parametrize(
    ("text", "message", "suggestion"),
    [
        ("stauts node174", "unknown command `stauts`", "status"),
        ("hots", "unknown command `hots`", "hosts"),
        ("hosts ad node1 1.2.3.4", "unknown `hosts` sub-command `ad`", "hosts add"),
        ("status node174 nede=1G", "unknown option `nede=`", "need=1G"),
        ("status node174 need=lots", "not a size", None),
        ("status node174 other", "one target at a time", None),
        ("status node174 relative/path", "weight paths must be absolute: `relative/path`", None),
        ("status node174 ~/models/glm5", "weight paths must be absolute", None),
        ("hosts add", "give a NAME and an ADDRESS", None),
        ("hosts add node1", "give an ADDRESS after the NAME `node1`", None),
        ("hosts add node1 1.2.3.4 port=99999", "port=", None),
        ("hosts add 'bad name' 1.2.3.4", "not a valid host name", None),
        ("status 'node;rm -rf /'", "not a valid host name", None),
        ("status node1 '/x\x1by'", "control characters", None),
        ("report", "`report` needs a sub-command: schedule, list, remove, resume, now", None),
        ('report schedule "61 8 * * *" UTC', "`61 8 * * *`: minute 61 is out of range 0-59", None),
        ('report schedule "0 24 * * 1-5" UTC', "hour 24 is out of range 0-23", None),
        ('report schedule "0 8 0 * *" UTC', "day of the month 0 is out of range 1-31", None),
        ('report schedule "0 8 * 13 *" UTC', "month 13 is out of range 1-12", None),
        ('report schedule "*/0 8 * * *" UTC', "the minute step `/0` must be at least 1", None),
        ('report schedule "50-10 8 * * *" UTC', "the minute range 50-10 runs backwards", None),
        ('report schedule "x 8 * * *" UTC', "`x` is not a minute (0-59", None),
    ],
)
def test_bad_input_gets_usage_and_suggestion(text, message, suggestion):
    with pytest.raises(UsageError) as err:
        G.parse(text)
    assert message in str(err.value)
    assert err.value.suggestion == suggestion


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("status  <http://node174|node174>", "status node174"),
        ("status\u00a0node174", "status node174"),
        ("report schedule \u201c0 8 * * 1-5\u201d <#C123|train>", 'report schedule "0 8 * * 1-5" #C123|train'),
        ("a &amp; b &lt;x&gt;", "a & b <x>"),
        ("status <mailto:x@y.z|x@y.z>", "status x@y.z"),
    ],
)
def test_normalise_slack_text(raw, clean):
    assert normalize(raw) == clean


def test_help_depends_on_role():
    viewer, admin = G.help(Role.VIEWER), G.help(Role.ADMIN)
    assert "hosts add" not in viewer and "hosts add" in admin
    assert "need operator or admin rights" in viewer


def test_help_of_a_command_or_of_a_typo():
    assert G.help(Role.ADMIN, "hosts add").startswith("/gpu hosts add NAME ADDRESS") and "hosts remove" not in G.help(
        Role.ADMIN, "hosts add"
    )
    assert G.help(Role.VIEWER, "hosts add") == "`hosts add` needs the admin role"
    assert "/gpu hosts show NAME" in G.help(Role.VIEWER, "hosts nope")  # no such sub-command: the verb's help
    with pytest.raises(UsageError) as err:
        G.help(Role.VIEWER, "stauts")
    assert (
        str(err.value) == "no command `stauts`"
        and err.value.suggestion == "help status"
        and "/gpu status" in err.value.usage
    )
    with pytest.raises(UsageError) as err:
        G.help(Role.VIEWER, "foo")
    assert (
        err.value.suggestion is None
        and "commands: `audit`" in err.value.usage
        and "/gpu help COMMAND" in err.value.usage
    )


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_no_text_raises_anything_but_a_usage_error(text):
    with contextlib.suppress(UsageError):
        G.parse(text)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "status",
                "hosts",
                "add",
                "show",
                "group:",
                "need=",
                "=",
                "/",
                "'",
                '"',
                "<",
                ">",
                "|",
                "all",
                "help",
                "x" * 300,
                "\x00",
                "é",
            ]
        ),
        max_size=8,
    )
)
def test_no_word_salad_raises_anything_but_a_usage_error(words):
    with contextlib.suppress(UsageError):
        G.parse(" ".join(words))


def test_a_parser_bug_still_reads_as_usage():
    from bot.words.commands.grammar import CommandSpec

    def broken(args):
        raise KeyError("boom")

    g = Grammar([CommandSpec(("x",), "x", "x", Role.VIEWER, broken)])
    with pytest.raises(UsageError):
        g.parse("x")


def test_report_channel_keeps_the_id_slack_sends():
    parsed = G.parse('report schedule "0 8 * * 1-5" Europe/Berlin group:train <#C0777ABC|ops>')
    assert parsed.command.channel == "C0777ABC"


def test_ipv6_addresses_are_hosts_too():
    from bot.foundation.names import endpoint, validate_address

    assert G.parse("hosts add v6 ::1").command == HostsAdd("v6", "::1")
    assert G.parse("hosts add v6 [2001:db8::1] port=2222").command.address == "[2001:db8::1]"
    assert [validate_address(a) for a in ("::1", "[2001:DB8::1]", "fe80::1%eth0", "10.0.0.5", "gpu9.lab.example")] == [
        "::1",
        "2001:db8::1",
        "fe80::1%eth0",
        "10.0.0.5",
        "gpu9.lab.example",
    ]
    assert endpoint("2001:db8::1", 22) == "[2001:db8::1]:22" and endpoint("10.0.0.5", 2222) == "10.0.0.5:2222"
    for bad in (":1", "a b", "-oProxyCommand=id", "[10.0.0.5"):
        with pytest.raises(UsageError, match="not a valid address|not a host address"):
            validate_address(bad)


def test_dotted_numbers_that_are_no_ipv4_address_are_refused_not_taken_for_a_name():
    from bot.foundation.names import validate_address

    for bad, said in (
        ("10.0.0.999", "`10.0.0.999` is not a valid IPv4 address (999 is over 255)"),
        ("10.0.5", "`10.0.5` is not a valid IPv4 address (an IPv4 address has 4 numbers)"),
        ("1.2.3.4.5", "an IPv4 address has 4 numbers"),
        ("010.0.0.1", "a number has a leading zero"),
        ("gpu..lab", "is not a valid DNS name: an empty label"),
        ("gpu.-lab", "the label `-lab` starts or ends with `-`"),
        ("a" * 64 + ".lab", "a label longer than 63 characters"),
    ):
        with pytest.raises(UsageError) as caught:
            validate_address(bad)
        assert said in str(caught.value), (bad, str(caught.value))
    assert [validate_address(a) for a in ("node174", "gpu-9.lab.example.", "10.0.0.255", "3com.example")] == [
        "node174",
        "gpu-9.lab.example.",
        "10.0.0.255",
        "3com.example",
    ]


def test_a_refusal_names_what_was_given():
    for text, said in (
        ("hosts add n1 1.2.3.4 group=$(id)", "`$(id)` is not a valid group name"),
        ("hosts add n1 1.2.3.4 user=root;id", "`root;id` is not a plain user name"),
        ('hosts add n1 "127.0.0.1 -oProxyCommand=id"', "`127.0.0.1 -oProxyCommand=id` is not a host address"),
        # a refused character after a space: both were given, the extra word is named
        # (it read 'give a NAME and an ADDRESS')
        (
            "hosts add n1 10.0.0.5 ;id",
            "unexpected `;id` after the ADDRESS `10.0.0.5`: `;` is not allowed in an address",
        ),
        (
            normalize("hosts add n1 10.0.0.5 &gt; /tmp/x"),
            "unexpected `>` after the ADDRESS `10.0.0.5`: `>` is not allowed",
        ),
        (
            "hosts add n1 10.0.0.5 10.0.0.6",
            "unexpected `10.0.0.6` after the ADDRESS `10.0.0.5` (an address is one word)",
        ),
    ):
        with pytest.raises(UsageError) as caught:
            G.parse(text)
        assert said in str(caught.value), (text, str(caught.value))


def test_watch_and_report_share_their_words_and_each_refuses_with_its_own_usage():
    """`watch` and `report schedule` parse spans, channels, `group:NAME` and item numbers with one set of
    functions (bot/words/commands/words.py); a bad channel in `watch` was refused with `report schedule`'s usage."""
    from bot.slack.routes import command_grammar

    g = command_grammar()
    with pytest.raises(UsageError) as err:
        g.parse("watch all #Not-A-Channel!")
    assert str(err.value) == "`#Not-A-Channel!` is not a channel name" and err.value.usage.startswith("/gpu watch ")
    with pytest.raises(UsageError) as err:
        g.parse('report schedule "0 8 * * *" UTC #Not-A-Channel!')
    assert str(err.value) == "`#Not-A-Channel!` is not a channel name" and err.value.usage.startswith(
        "/gpu report schedule "
    )
    assert g.parse("watch group:train <#C0TRAIN1|train> repeat=4h").command.channel == "C0TRAIN1"
    assert g.parse("watch remove #12").command.watch_id == 12 and g.parse("report remove #12").command.schedule_id == 12
    for text, said in (
        ("watch remove x", "give the watch's number"),
        ("silence end", "give the silence's number"),
        ("report remove", "give the schedule's number (see `report list`)"),
        ("watch group:", "`group:` needs a group name"),
        ("report now group:", "`group:` needs a group name"),
    ):
        with pytest.raises(UsageError, match=re.escape(said)):
            g.parse(text)
