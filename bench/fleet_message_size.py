"""How much text a fleet summary sends to Slack, per message.

    python bench/fleet_message_size.py [--sizes 250,1000,3000]

Renders the `/gpu status all` answer for N synthetic hosts (tests/unit/test_fleet_blocks.py's mix: every
7th unreachable with a long reason, every 5th not ready with a python3 holding a GPU, the rest
ready) exactly as the Slack handler sends it, and prints, per N: the characters of text of every
host's line together (what one message would hold with every host in it),
of the summary message (bounded by ``MESSAGE_TEXT_BUDGET``), the number of thread messages and the
largest, and the render time. Slack refuses a message past about 13,200 characters of block text
(``msg_blocks_too_long``, slackapi/bolt-js#2509).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.slack.blocks import MESSAGE_TEXT_BUDGET, block_text_length  # noqa: E402
from bot.slack.status.blocks import fleet_blocks  # noqa: E402
from bot.words.render.status_view import fleet_view  # noqa: E402
from tests.unit.test_fleet_blocks import report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,1000,3000")
    args = parser.parse_args()
    print(f"budget {MESSAGE_TEXT_BUDGET:,} characters a message")
    print(
        f"{'hosts':>6} {'all lines':>10} {'summary':>8} {'blocks':>6} {'thread msgs':>11} {'largest':>8} "
        f"{'render ms':>9}"
    )
    for n in (int(x) for x in args.sizes.split(",")):
        reports = [report(i) for i in range(1, n + 1)]
        t0 = time.perf_counter()
        view = fleet_view("all hosts", reports)
        blocks, thread = fleet_blocks(view)
        ms = (time.perf_counter() - t0) * 1000
        every = sum(len(text) + 12 for _, text in view.lines)
        largest = max((block_text_length(m) for m in thread), default=0)
        print(
            f"{n:>6} {every:>10,} {block_text_length(blocks):>8,} {len(blocks):>6} {len(thread):>11} "
            f"{largest:>8,} {ms:>9.1f}"
        )


if __name__ == "__main__":
    main()
