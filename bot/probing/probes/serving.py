"""Each configured unit as a model server, read in the status batch: is it serving, and healthy?

One framed probe per unit (``serve.N``, :func:`serving_command`), in the same round trip as the
rest of the batch. For an inactive unit it prints only ``ActiveState=``; for an active one also
its main PID, its processes (``Pids``: its cgroup's under ``/sys/fs/cgroup``, else the main process
and its descendants, as the pivot's health wait reads them), its ``ExecStart`` (``Exec``, hex), the
health URL asked (``Url``, from ``UrlFrom`` ``setting`` or ``command``) and the HTTP status
``curl`` got (``Code``; ``000`` no answer, ``none`` curl missing). Parsed by :func:`parse_serving`;
both joined in :class:`ServingProbe`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import Frame, Probe, ProbePlan
from bot.probing.probes.readings import UnitService
from bot.probing.probes.servers import default_url, exec_argv, url_awk

q = shlex.quote

UNIT_PIDS_SH = "\n".join(
    [
        'pids=""',
        "for b in /sys/fs/cgroup /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do",
        '  if [ -n "$cg" ] && [ -d "$b$cg" ]; then',
        '    pids=$(find "$b$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | tr "\\n" " "); break',
        "  fi",
        "done",
        'if [ -z "$pids" ] && [ "$main" -gt 0 ]; then',
        '  pids=$(ps -e -o pid= -o ppid= | awk -v root="$main" \'{p[NR]=$1; pp[NR]=$2} END {keep[root]=1; '
        "out=root; n=1; while (n) {n=0; for (i=1; i<=NR; i++) if ((pp[i] in keep) && !(p[i] in keep)) "
        '{keep[p[i]]=1; out=out " " p[i]; n=1}} print out}\')',
        "fi",
    ]
)
"""Sets ``$pids`` to the processes of the unit whose control group is ``$cg`` and main PID ``$main``:
its cgroup's, else the tree under the main process."""


def serving_command(unit: str, index: int, url: str | None, http_timeout_s: float) -> str:
    """The ``serve.N`` probe of ``unit``, the batch's ``unit.N`` (whose ``ActiveState`` and ``MainPID`` it
    reads from ``$GPUBOT_D/unit.N.out``: an inactive unit costs no more ``systemctl`` call; an active
    one one more, for ``ControlGroup`` and ``ExecStart``). ``url``: the unit's configured health URL
    (``None``: the default of a known server in its ``ExecStart``, derived on the host by
    :func:`~bot.probing.probes.servers.url_awk`). Both are quoted; nothing of them reaches the shell as code."""
    return "\n".join(
        [
            f'u={q(unit)}; url={q(url or "")}; f="$GPUBOT_D/unit.{int(index)}.out"',
            '[ -s "$f" ] || exit 1',
            'a=$(sed -n \'s/^ActiveState=//p\' "$f" | head -n 1); echo "ActiveState=$a"',
            '[ "$a" = active ] || exit 0',
            'main=$(sed -n \'s/^MainPID=//p\' "$f" | head -n 1); case "$main" in ""|*[!0-9]*) main=0;; esac',
            'echo "MainPID=$main"',
            'show=$(systemctl show -p ControlGroup -p ExecStart -- "$u" 2>/dev/null)',
            "cg=$(printf '%s\\n' \"$show\" | sed -n 's/^ControlGroup=//p' | head -n 1)",
            "x=$(printf '%s\\n' \"$show\" | sed -n 's/^ExecStart=//p' | head -n 1)",
            UNIT_PIDS_SH,
            'echo "Pids=$pids"',
            "printf 'Exec=%s\\n' \"$(printf '%s' \"$x\" | head -c 4096 | od -An -v -tx1 | tr -d ' \\n')\"",
            'if [ -n "$url" ]; then echo UrlFrom=setting; else url=$(printf \'%s\\n\' "$x" | awk '
            f"{q(url_awk())}); echo UrlFrom=command; fi",
            'echo "Url=$url"',
            '[ -n "$url" ] || exit 0',
            "command -v curl >/dev/null 2>&1 || { echo Code=none; exit 0; }",
            f"echo \"Code=$(curl -sS -o /dev/null -w '%{{http_code}}' --max-time {max(1, int(http_timeout_s))} "
            '--url "$url")"',
        ]
    )


def parse_serving(unit: str, out: ProbeOutput | None) -> UnitService:
    """A :class:`UnitService` from one ``serve.N`` frame (``None``: the probe never printed one).
    Never raises; whatever could not be read is ``None`` with ``error`` saying why."""
    if out is None or out.exit_status is None:
        return UnitService(unit, error="the probe did not finish")
    kv = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    if out.exit_status != 0 or "ActiveState" not in kv or not kv["ActiveState"]:
        why = (
            (out.stderr.strip() or out.stdout.strip()).splitlines()[-1][:300]
            if (out.stderr.strip() or out.stdout.strip())
            else "systemctl did not answer"
        )
        return UnitService(unit, error=f"state unreadable: {why}")
    if kv["ActiveState"] != "active":
        return UnitService(unit, active=False)
    main = int(kv["MainPID"]) if kv.get("MainPID", "").isdecimal() else 0
    pids = sorted({int(p) for p in kv.get("Pids", "").split() if p.isdecimal()})
    try:
        argv = exec_argv(bytes.fromhex(kv.get("Exec", "")).decode("utf-8", "replace"))
    except ValueError:
        argv = []
    url = kv.get("Url") or None
    source = kv.get("UrlFrom") or None
    code_text = kv.get("Code", "")
    code = int(code_text) if code_text.isdecimal() and code_text != "000" else None
    error = None
    if url is None:
        error = (
            "no health URL is known (no `health` setting for the unit, and its command line is no server gpubot knows)"
        )
    elif code_text == "none":
        error = "curl is not installed on the host"
    elif code is None:
        said = out.stderr.strip().splitlines()[-1][:200] if out.stderr.strip() else "no answer"
        error = f"{url}: {said}"
    if source == "command" and url is not None:
        ours = default_url(argv)
        if ours is None or ours[0] != url:
            # The host split the command line at spaces; a quoted argument can read otherwise here.
            return UnitService(
                unit,
                True,
                main,
                pids,
                argv,
                url,
                source,
                None,
                f"the health URL read on the host ({url}) is not the one its command line gives "
                f"({ours[0] if ours else 'none'}); set the unit's `health` URL",
            )
    return UnitService(unit, True, main, pids, argv, url, source, code, error)


class ServingProbe(Probe):
    """Each of ``plan.units`` as a model server (frames ``serve.0``..., after the units' ``unit.N``
    frames, whose output they read; the health URL from ``plan.health_urls``, same index). Fills ``services``."""

    fields = ("services",)

    def frames(self, plan: ProbePlan) -> list[Frame]:
        urls = plan.health_urls
        return [
            Frame(f"serve.{i}", serving_command(unit, i, urls[i] if i < len(urls) else None, plan.health_timeout_s))
            for i, unit in enumerate(plan.units)
        ]

    def names(self, plan: ProbePlan) -> list[str]:
        return [f"serve.{i}" for i in range(len(plan.units))]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"services": [parse_serving(u, outputs.get(f"serve.{i}")) for i, u in enumerate(plan.units)]}
