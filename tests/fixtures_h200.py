"""Load the captured H200 outputs in ``tests/fixtures/h200`` as :class:`ProbeOutput`.

Each ``NAME.out`` is stdout followed by a last line ``__exit=N`` added by the capture;
``NAME.err`` is stderr where the command printed any (see ``tests/fixtures/README.md``).
"""

from __future__ import annotations

from pathlib import Path

from bot.probing.probes.frames import ProbeOutput

H200 = Path(__file__).parent / "fixtures" / "h200"


def captured(name: str, *, prefix: str = "") -> ProbeOutput:
    """``captured("apps_busy")`` -> the output of that capture; ``prefix`` is put before stdout."""
    text = (H200 / f"{name}.out").read_text()
    body, _, status = text.rpartition("__exit=")
    err_file = H200 / f"{name}.err"
    stderr = err_file.read_text() if err_file.exists() else ""
    return ProbeOutput(name=name, stdout=prefix + body, stderr=stderr, exit_status=int(status.strip()))
