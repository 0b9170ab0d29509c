"""The command line's one presenter of errors (bot/entry/cli/errors.py): a line on stderr, an exit status,
never a password; anything else is raised again."""

import pytest
from sqlalchemy.exc import OperationalError

from bot.entry.cli.errors import EX_CONFIG, EX_ERROR, EX_IOERR, EX_NOHOST, EX_USAGE, configuration_error, exit_status
from bot.foundation.errors import (
    ConfigError,
    DatabaseUnavailable,
    HostKeyRejected,
    NotConfigured,
    NotFoundError,
    PolicyError,
    UsageError,
)

URL = "postgresql+asyncpg://gpubot:hunter2@db:5432/gpubot"


@pytest.mark.parametrize(
    ("exc", "status", "said"),
    [
        (
            NotFoundError("no host called `nod174`", near=["node174"]),
            EX_NOHOST,
            "gpubot: no host called `nod174`. Did you mean: node174?",
        ),
        (UsageError("bad window", suggestion="7d"), EX_USAGE, "gpubot: bad window (did you mean `7d`?)"),
        (NotConfigured("no allowed roots are set"), EX_CONFIG, "gpubot: no allowed roots are set"),
        (
            DatabaseUnavailable("postgresql at db:5432", "connection refused"),
            EX_IOERR,
            "gpubot: the database is unavailable (postgresql at db:5432: connection refused); GPUBOT_DATABASE_URL is "
            "postgresql+asyncpg://gpubot:***@db:5432/gpubot",
        ),
        (HostKeyRejected("node174: host key changed"), EX_ERROR, "gpubot: node174: host key changed"),
        (
            OperationalError("SELECT 1", {}, Exception("no such table: hosts")),
            EX_IOERR,
            "gpubot: database error (postgresql+asyncpg://gpubot:***@db:5432/gpubot): no such table: hosts",
        ),
        (
            FileNotFoundError(2, "No such file or directory", "/etc/gpubot/key"),
            EX_IOERR,
            "gpubot: No such file or directory: /etc/gpubot/key",
        ),
    ],
)
def test_each_error_is_one_line_and_its_exit_status(exc, status, said, capsys):
    assert exit_status(exc, database_url=URL) == status
    err = capsys.readouterr().err
    assert err == said + "\n" and "hunter2" not in err


def test_a_configuration_problem_exits_78_naming_it(capsys):
    assert configuration_error(ConfigError("GPUBOT_UNIT is not a setting (did you mean GPUBOT_UNITS?)")) == EX_CONFIG
    assert configuration_error(PolicyError("GPUBOT_APPROVAL_POLICY rule 1: approvals must be at least 1")) == EX_CONFIG
    assert capsys.readouterr().err.splitlines() == [
        "gpubot: configuration error: GPUBOT_UNIT is not a setting (did you mean GPUBOT_UNITS?)",
        "gpubot: configuration error: GPUBOT_APPROVAL_POLICY rule 1: approvals must be at least 1",
    ]


def test_a_bug_is_raised_again_with_its_traceback():
    with pytest.raises(ZeroDivisionError):
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError as exc:
            exit_status(exc, database_url=URL)
