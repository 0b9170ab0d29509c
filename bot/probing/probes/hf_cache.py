"""The size of the Hugging Face cache: ``du -sxb`` of the configured path, else the SSH user's ``$HF_HOME`` or
``~/.cache/huggingface``, and where that was (:class:`HfCacheProbe`)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.folders import parse_du
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import LOST, Frame, Probe, ProbePlan


def hf_cache_path(out: ProbeOutput, configured: str | None) -> str:
    """The path the HF-cache probe measured: the configured one, else what ``du`` printed."""
    if configured:
        return configured
    if out.exit_status is not None:  # a frame cut short may end in the middle of a line
        for line in out.stdout.splitlines():
            head, tab, tail = line.partition("\t")
            if tab and head.strip().isdecimal() and tail.strip():
                return tail.strip()
        for line in out.stderr.splitlines():
            m = _DU_CANNOT.match(line.strip())
            if m:
                return m.group(1)
    return "~/.cache/huggingface"


_DU_CANNOT = re.compile(r"^du: cannot (?:access|read directory) '(.+)': ")


class HfCacheProbe(Probe):
    """Size of the Hugging Face cache (``plan.hf_cache``, else the SSH user's ``$HF_HOME`` or
    ``~/.cache/huggingface``): ``du -sxb`` in frame ``hf``. Fills ``hf_cache``."""

    fields = ("hf_cache",)
    tools = {"hf": "du of the HF cache"}

    def frames(self, plan: ProbePlan) -> list[Frame]:
        if plan.hf_cache:
            return [Frame("hf", f"du -sxb -- {shlex.quote(plan.hf_cache)}")]
        return [Frame("hf", 'du -sxb -- "${HF_HOME:-$HOME/.cache/huggingface}"')]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["hf"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        out = outputs.get("hf", LOST)
        return {"hf_cache": parse_du(hf_cache_path(out, plan.hf_cache), out)}
