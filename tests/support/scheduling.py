"""``--dist loadgroup`` for ``make test``: tests that must run one after the other on one worker, by file.

pytest-xdist's own ``loadgroup`` reads ``@pytest.mark.xdist_group`` through a suffix it writes into each test's
node id on the worker (``item._nodeid``); pytest 9.2 keeps node ids elsewhere, so that suffix is lost and every
test is scheduled alone (pytest-xdist 3.8). The controller knows only node ids, so the groups here are files:
:data:`SERIAL_FILES` maps a file to the group its tests share; every other test is a work unit of its own, as
under ``--dist load``. Groups go out first (xdist's ``--loadscope-reorder``: the scopes with most tests first),
so the longest unit starts while the short ones fill the other workers.

tests/conftest.py returns :class:`GroupScheduling` from ``pytest_xdist_make_scheduler`` and checks, as tests are
collected, that each test with a marker of :data:`SERIAL_MARKERS` lives in a file of its group.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling

SERIAL_FILES = {"tests/e2e/test_docker.py": "docker"}
"""File (as in node ids) -> the group its tests share. The Docker tests share one engine, started and stopped by a
module fixture, and the images they build."""

SERIAL_MARKERS = {"docker": "docker"}
"""Marker -> the group a test carrying it must be in (its file in :data:`SERIAL_FILES`)."""


def group_of(nodeid: str) -> str | None:
    """The group of the test ``nodeid`` (its file's, or an ``@name`` suffix as xdist writes it), else ``None``."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    return SERIAL_FILES.get(nodeid.split("::", 1)[0])


class GroupScheduling(LoadGroupScheduling):
    """xdist's ``loadgroup`` with the groups of :func:`group_of`."""

    def _split_scope(self, nodeid: str) -> str:
        group = group_of(nodeid)
        return f"group:{group}" if group is not None else nodeid
