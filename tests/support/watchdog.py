"""A hung test fails alone and says where it waits, instead of stalling the whole run.

pytest-timeout (``timeout`` in pyproject.toml, the ``signal`` method) fails a test that runs past
its limit and prints the threads' stacks; the tests share one asyncio loop, whose threads' stacks
show only the loop waiting in ``select``. So shortly before that limit this plugin prints the stack
of every unfinished asyncio task to stderr (``Task.print_stack``): the coroutine that never got its
answer. The limit is a liveness guard for a run that would otherwise last until CI kills it, never a
bound on how fast a test must be (a test past it is hung, not slow).
Use with ``pytest_plugins = ["tests.support.watchdog"]``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Generator

import pytest

WARN_BEFORE_S = 30.0
"""Seconds before pytest-timeout's limit at which the unfinished tasks are printed."""


def dump_tasks(nodeid: str) -> None:
    """Print every unfinished asyncio task's stack (any loop) to stderr, headed by ``nodeid``."""
    tasks = [t for t in list(asyncio.tasks._all_tasks) if not t.done()]  # type: ignore[attr-defined]
    print(
        f"\n=== {nodeid}: still running near its timeout; {len(tasks)} unfinished asyncio task(s) ===",
        file=sys.stderr,
        flush=True,
    )
    for task in tasks:
        try:
            task.print_stack(file=sys.stderr)
        except Exception as exc:  # a task finishing while it is printed
            print(f"({task!r}: {exc})", file=sys.stderr)
    sys.stderr.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        limit = float(item.config.getini("timeout") or 0)
    except ValueError:  # pytest-timeout not installed: no limit
        limit = 0.0
    marker = item.get_closest_marker("timeout")
    if marker and marker.args:
        limit = float(marker.args[0])
    timer = None
    if limit > WARN_BEFORE_S:
        timer = threading.Timer(limit - WARN_BEFORE_S, dump_tasks, args=(item.nodeid,))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
