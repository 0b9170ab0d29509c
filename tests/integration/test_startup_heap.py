"""The first services a process opens freeze its start-up heap: the collector's full passes skip what start-up
made (it stays alive), a second opening freezes nothing more, and what is made afterwards is still collected, by
the collector's own passes too (the youngest generation every YOUNG_COLLECTION_EVERY allocations)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import gc, os, weakref
from bot.foundation.config import Settings
from bot.wiring import open_services

assert gc.get_freeze_count() == 0
settings = Settings(_env_file=None, database_url="sqlite+aiosqlite:///" + os.environ["DB"], ssh_config=os.devnull)
first = open_services(settings, role="inline")
frozen = gc.get_freeze_count()
second = open_services(settings, role="inline")
assert gc.get_freeze_count() == frozen > 1000, (frozen, gc.get_freeze_count())


class Cycle:
    pass


a, b = Cycle(), Cycle()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None  # made after start-up: collected

from bot.foundation.lifecycle import YOUNG_COLLECTION_EVERY

assert gc.get_threshold()[0] == YOUNG_COLLECTION_EVERY > 700
gc.collect()
cycles = []
for _ in range(3 * YOUNG_COLLECTION_EVERY):  # garbage cycles, never collected by hand
    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    cycles.append(weakref.ref(a))
    del a, b
assert sum(ref() is None for ref in cycles) > YOUNG_COLLECTION_EVERY // 2, "the collector ran on its own"
print("ok", frozen)
"""


def test_the_first_services_freeze_the_start_up_heap_once(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={"DB": str(tmp_path / "gpubot.db"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")
