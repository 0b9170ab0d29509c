"""Parsers for the coreutils and systemd probes: ``df -P -B1``, ``du -sxb``, ``systemctl show``.

Formats: ``df -P`` is the POSIX format (one header line, then ``FS size used avail capacity
mount``; with ``-B1`` sizes are bytes); ``du -sxb`` prints ``<bytes>\\t<path>``; ``systemctl
show -p A,B`` prints ``Key=Value`` lines.
"""

from __future__ import annotations

from bot.probes.frames import ProbeOutput
from bot.probes.readings import Disk, Folder, FolderState, HostContext, Unit


def _stderr_line(out: ProbeOutput) -> str:
    lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip()]
    return lines[0] if lines else f"exit status {out.exit_status}"


def parse_df(path: str, out: ProbeOutput) -> Disk:
    """A :class:`Disk` for ``path``; on failure ``error`` says why and sizes are ``None``."""
    if out.exit_status != 0:
        return Disk(path=path, error=_stderr_line(out))
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.strip()]
    if len(rows) < 2 or len(rows[-1]) < 6:
        return Disk(path=path, error=f"unexpected df output: {out.stdout.strip()[:200]!r}")
    row = rows[-1]
    try:
        # The mount point is the last column and may contain spaces; the first five are fixed.
        fs, size, used, avail = row[0], int(row[1]), int(row[2]), int(row[3])
    except ValueError:
        return Disk(path=path, error=f"unexpected df output: {out.stdout.strip()[:200]!r}")
    mount = " ".join(row[5:])
    return Disk(path=path, filesystem=fs, mount=mount, size_bytes=size, used_bytes=used, avail_bytes=avail)


def parse_du(path: str, out: ProbeOutput) -> Folder:
    """A :class:`Folder` for ``path``.

    Exit 0 with a total: present. Exit 1 with "No such file or directory" and no total:
    absent. Exit 1 *with* a total (some entries unreadable): partial, size is a lower bound.
    """
    total: int | None = None
    for line in out.stdout.splitlines():
        head = line.split("\t", 1)[0].strip()
        if head.isdigit():
            total = int(head)
    if out.exit_status == 0 and total is not None:
        return Folder(path=path, state=FolderState.PRESENT, size_bytes=total)
    if total is None and "No such file or directory" in out.stderr:
        return Folder(path=path, state=FolderState.ABSENT)
    if total is not None and out.exit_status == 1:
        return Folder(path=path, state=FolderState.PARTIAL, size_bytes=total, warning=_stderr_line(out))
    if out.exit_status in (124, 137) or out.exit_status is None:
        return Folder(path=path, state=FolderState.ERROR, warning="du did not finish before the probe timeout")
    return Folder(path=path, state=FolderState.ERROR, warning=_stderr_line(out))


def hf_cache_path(out: ProbeOutput, configured: str | None) -> str:
    """The path the HF-cache probe measured: the configured one, else what ``du`` printed."""
    if configured:
        return configured
    for line in out.stdout.splitlines():
        if "\t" in line:
            return line.split("\t", 1)[1].strip()
    for line in out.stderr.splitlines():  # du: cannot access '/root/.cache/huggingface': ...
        if "'" in line:
            return line.split("'")[1]
    return "~/.cache/huggingface"


def parse_unit(name: str, out: ProbeOutput) -> Unit:
    """A :class:`Unit` from ``systemctl show`` output; ``error`` when systemctl failed."""
    if out.exit_status != 0:
        if out.exit_status == 127:
            return Unit(name=name, error="systemctl is not available on this host")
        return Unit(name=name, error=_stderr_line(out))
    values: dict[str, str] = {}
    for line in out.stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    if "ActiveState" not in values:
        return Unit(name=name, error=f"unexpected systemctl output: {out.stdout.strip()[:200]!r}")
    pid = values.get("MainPID", "")
    return Unit(
        name=name,
        load_state=values.get("LoadState"),
        active_state=values["ActiveState"],
        sub_state=values.get("SubState"),
        main_pid=int(pid) if pid.isdigit() else None,
    )


def parse_context(driver: ProbeOutput | None, uptime: ProbeOutput | None, hostname: ProbeOutput | None) -> HostContext:
    """Driver version from ``/proc/driver/nvidia/version``, uptime seconds from ``/proc/uptime``."""
    kernel_driver = None
    if driver and driver.exit_status == 0:
        for line in driver.stdout.splitlines():
            if line.startswith("NVRM version:"):
                kernel_driver = next((w for w in line.split() if w[:1].isdigit() and "." in w), None)
    up = None
    if uptime and uptime.exit_status == 0 and uptime.stdout.split():
        try:
            up = float(uptime.stdout.split()[0])
        except ValueError:
            up = None
    name = hostname.stdout.strip() or None if hostname and hostname.exit_status == 0 else None
    return HostContext(hostname=name, kernel_driver=kernel_driver, uptime_s=up)
