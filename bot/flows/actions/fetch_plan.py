"""The plan of a ``fetch``: the Hub's metadata as the host sees it, the target folder, the disk, what is there.

One read-only round trip (:func:`bot.flows.actions.fetch_remote.plan_commands`) and one for the
configured units' model arguments; then either a :class:`~bot.flows.actions.plan.Plan` with one
:class:`~bot.flows.actions.plan.FetchStep`, or :class:`~bot.foundation.errors.PlanRefused` listing every
reason, before anything is written on the host.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from bot.domain.readiness.report import StatusReport
from bot.flows.actions import fetch_remote
from bot.flows.actions.fetch_remote import HubAnswer, TargetState
from bot.flows.actions.kinds import ActionSpec
from bot.flows.actions.model_check import parse_unit_command, unit_command
from bot.flows.actions.plan import FetchFile, FetchStep, Plan
from bot.flows.actions.policy import allowed_roots, configured_units
from bot.flows.services import Services
from bot.foundation.errors import NotConfigured, PlanRefused, ProbeError
from bot.foundation.sizes import human_bytes
from bot.probing.probes.disks import parse_df
from bot.probing.probes.engine import run_framed
from bot.probing.probes.readings import FolderState
from bot.probing.probes.servers import served_model
from bot.probing.ssh.target import HostTarget

INSTALL = "`pip install huggingface_hub` (vLLM hosts have it already)"


def endpoint_of(services: Services, probe: dict[str, Any]) -> str:
    """The Hub a host downloads from: its own ``hf_endpoint`` (``--probe``), else ``GPUBOT_HF_ENDPOINT``."""
    return str(probe.get("hf_endpoint") or services.settings.actions.hf_endpoint).rstrip("/")


def _under(path: str, root: str) -> bool:
    return path != root.rstrip("/") and path.startswith(root.rstrip("/") + "/")


def default_target(repo: str, volumes: list[str], roots: list[str]) -> str | None:
    """``VOLUME/NAME`` for the first model volume whose folder for the repo lies strictly under an allowed root."""
    name = repo.split("/", 1)[1]
    for v in volumes:
        t = posixpath.join(v.rstrip("/") or "/", name)
        if any(_under(t, r) for r in roots):
            return t
    return None


def complete(files: tuple[FetchFile, ...], there: dict[str, int]) -> list[FetchFile]:
    """The planned files already on disk at their full size."""
    return [f for f in files if there.get(f.path) == f.size]


@dataclass(frozen=True)
class _Seen:
    hub: HubAnswer
    where: TargetState | None
    avail: int | None
    mount: str | None


async def units_naming(
    services: Services, target: HostTarget, units: list[str], folders: set[str], timeout: float
) -> list[str]:
    """The configured units whose server's model argument is one of ``folders`` (one read-only round trip)."""
    if not units:
        return []
    try:
        out = await run_framed(
            services.runner, target, [(f"unit.{i}", unit_command(u)) for i, u in enumerate(units)], timeout=timeout
        )
    except ProbeError:
        return []
    named = []
    for i, u in enumerate(units):
        cmd = parse_unit_command(out.get(f"unit.{i}"))
        served = served_model(cmd.argv) if cmd.argv else None
        if served is not None and served.model.rstrip("/") in {f.rstrip("/") for f in folders}:
            named.append(u)
    return named


def _hub_refusal(hub: HubAnswer, spec: ActionSpec, host: str, endpoint: str) -> str | None:
    repo = spec.repo
    match hub.error:
        case None:
            return None if hub.sha else f"the Hub at {endpoint} gave no commit for `{repo}`"
        case "client":
            return (
                f"the `hf` command is not installed on {host}: the Python package huggingface_hub is needed ({INSTALL})"
            )
        case "import":
            return (
                f"the `hf` command on {host} cannot import the Python package huggingface_hub ({hub.detail}): "
                f"reinstall it ({INSTALL})"
            )
        case "repo":
            return f"`{repo}` does not exist on {endpoint} (or it is private and {host} has no token that may read it)"
        case "revision":
            return f"`{repo}` has no revision `{spec.revision}` on {endpoint}"
        case "gated" if not hub.token:
            return (
                f"`{repo}` is a gated repo and {host} has no Hugging Face token: log in on the host as the user "
                "that downloads (`hf auth login`, or HF_TOKEN in its environment); a token is never typed in chat"
            )
        case "gated":
            return (
                f"`{repo}` is a gated repo and the token on {host} has no access to it (the Hub answered "
                f"{hub.status}): request access on the repo's page with that account"
            )
        case "offline":
            return f"{host}'s huggingface_hub is in offline mode (HF_HUB_OFFLINE): it downloads nothing"
        case "http":
            return f"the Hub at {endpoint} answered {hub.status} for `{repo}` from {host}: {hub.detail[:200]}"
        case "network":
            return (
                f"{host} cannot reach the Hub at {endpoint} (no network from the host, or a proxy or mirror is "
                f"needed: the host's `hf_endpoint` or GPUBOT_HF_ENDPOINT): {hub.detail[:200]}"
            )
        case _:
            return f"the host's huggingface_hub gave no readable answer on {host}: {hub.detail[:200]}"


async def plan_fetch(
    *,
    services: Services,
    spec: ActionSpec,
    target: HostTarget,
    group: str | None,
    probe: dict[str, Any],
    report: StatusReport,
    running: list[tuple[int, str]],
) -> Plan:
    """Plan ``spec`` (a fetch). ``running``: ``(fetch id, target)`` of the fetches the database holds as
    running on this host. Raises :class:`PlanRefused` (:class:`NotConfigured` when no allowed root covers the host)."""
    s = services.settings
    host = spec.host
    repo = spec.repo or ""
    endpoint = endpoint_of(services, probe)
    roots = allowed_roots(s.actions, host, group)
    if not roots:
        raise NotConfigured(
            "refused:\n"
            f"• nothing may be downloaded on {host}: no allowed roots are set (a fetch writes only under them), e.g. "
            '`GPUBOT_ALLOWED_ROOTS={"*": ["/shared/models"]}`'
        )
    volumes = list(probe.get("model_volumes") or s.probes.model_volumes)
    folder = spec.target or default_target(repo, volumes, roots)
    if folder is None:
        raise _refuse(
            [
                f"no model volume of {host} ({', '.join(volumes)}) lies inside the allowed roots ({', '.join(roots)}): "
                "give the folder with to=PATH"
            ]
        )
    folder = posixpath.normpath(folder)
    timeout = s.probes.batch_timeout_s
    out = await run_framed(
        services.runner,
        target,
        fetch_remote.plan_commands(
            repo=repo, revision=spec.revision, include=spec.include, endpoint=endpoint, target=folder, roots=roots
        ),
        timeout=max(timeout, 120.0),
    )
    df = parse_df(folder, out["df"]) if "df" in out else None
    seen = _Seen(
        fetch_remote.parse_hub(out.get("hub")),
        fetch_remote.parse_target(out.get("target")),
        df.avail_bytes if df else None,
        df.mount if df else None,
    )
    reasons: list[str] = []
    hub_said = _hub_refusal(seen.hub, spec, host, endpoint) or _untrusted_answer(seen.hub)
    if hub_said:
        reasons.append(hub_said)
    where = seen.where
    real = where.real if where else None
    root = None
    if where is None or real is None:
        reasons.append(f"{folder}: could not be checked on {host}")
    else:
        resolved = [(r, c) for r, c in zip(where.roots, roots, strict=False) if r]
        under = [(r, c) for r, c in resolved if _under(real, r)]
        if where.link:
            reasons.append(f"{folder} is a symbolic link (to {real}): give the real folder")
        elif any(real == r.rstrip("/") for r, _ in resolved):
            reasons.append(f"{folder} is an allowed root itself: download into a folder under it")
        elif not under:
            via = f" resolves to {real}," if real != folder else ""
            reasons.append(f"{folder}:{via} outside the allowed roots ({', '.join(roots)}; `GPUBOT_ALLOWED_ROOTS`)")
        elif where.mount:
            reasons.append(f"{folder}: {where.mount} (a download never goes through a mount point under the root)")
        elif where.place:
            reasons.append(f"{folder}: {where.place}")
        elif where.unsafe:
            reasons.append(where.unsafe)
        elif where.route == "sudo" and where.hf_unsafe:
            reasons.append(where.hf_unsafe)
        else:
            root = max(under, key=lambda rc: len(rc[0]))[1]
        busy = next((fid for fid, t in running if t.rstrip("/") == real.rstrip("/")), None)
        if where.running is not None or busy is not None:
            what = f"fetch #{busy}" if busy is not None else f"pid {where.running} on the host"
            reasons.append(f"a download into {real} is already running ({what}): one fetch per folder at a time")
        if where.route == "user" and not where.writable:
            reasons.append(
                f"{where.me} may not write in {where.base}, its own folder: `chmod u+w {where.base}` so it downloads"
            )
    files = seen.hub.files
    there = where.files if where else {}
    have = complete(files, there)
    todo = [f for f in files if f not in have]
    parts = sum(where.parts.values()) if where else 0
    need = sum(f.size for f in todo)  # a cut part is not counted: huggingface_hub 2.x starts that file again
    if not hub_said and not files:
        reasons.append(
            f"`{repo}` has no file"
            + (f" matching include={','.join(spec.include)}" if spec.include else "")
            + f" on {endpoint}"
        )
    if seen.avail is not None and not hub_said and seen.avail < need:
        reasons.append(_disk_refusal(report, seen, need, host))
    if reasons:
        raise _refuse(reasons)
    assert seen.hub.sha is not None and real is not None and root is not None
    units = await units_naming(services, target, configured_units(s.probes, probe), {real, folder}, timeout)
    total = sum(f.size for f in files)
    shards = [f for f in files if f.path.endswith(".safetensors")]
    lines = [
        f"fetch `{repo}` at {seen.hub.sha[:12]}"
        + (f" (revision {spec.revision})" if spec.revision else "")
        + f" from {endpoint} with {host}'s huggingface_hub {seen.hub.version or ''}".rstrip(),
        f"{len(files)} files, {human_bytes(total)}"
        + (f": {len(shards)} safetensors shards and {len(files) - len(shards)} other files" if shards else ""),
        f"into {real}" + ("" if spec.target else " (under the first model volume inside the allowed roots)"),
        _there_line(have, files, where, parts),
        f"free on {seen.mount or '?'}: {human_bytes(seen.avail)} now, about "
        f"{human_bytes(None if seen.avail is None else seen.avail - need)} after",
        "token: "
        + (f"available on {host} (never shown)" if seen.hub.token else f"none on {host}")
        + (" — the repo is gated" if seen.hub.gated else ""),
        ("units naming that folder as their model: " + ", ".join(units))
        if units
        else "no configured unit names that folder as its model",
    ]
    assert where is not None and where.route is not None
    who = {"root": "root", "user": where.me}.get(where.route, where.by_name or f"uid {where.by}")
    lines.insert(
        3,
        f"downloads as {who}"
        + {
            "root": " (the bot logs in as root)",
            "user": " (the bot user owns the folder it goes into)",
            "sudo": f", the owner of {where.base}, through sudo and the helper ({s.actions.sudo_helper} fetch)",
        }[where.route],
    )
    step = FetchStep(
        f"download {repo} into {real} ({human_bytes(need)} to fetch)",
        repo,
        seen.hub.sha,
        real,
        root,
        endpoint,
        files,
        spec.include,
        via=where.route,  # type: ignore[arg-type]
        hf=where.hf or "hf",
        owner=who,
    )
    expected = f"{real} holds `{repo}` at {seen.hub.sha[:12]}: {len(files)} files, {human_bytes(total)}, verified"
    return Plan(spec, report.snapshot_id, [step], lines, expected, volume=seen.mount, volume_avail_bytes=seen.avail)


COMMIT = re.compile(r"^[0-9a-f]{40}\Z")


def _untrusted_answer(hub: HubAnswer) -> str | None:
    """What the Hub (or a mirror) answered is checked before it reaches a command line: the commit is 40 hex
    digits, every file a relative path without ``..``, control characters or a leading ``-``."""
    if hub.error is not None or hub.sha is None:
        return None
    if not COMMIT.match(hub.sha):
        return f"the Hub answered a commit that is not one (`{hub.sha[:60]}`): nothing is downloaded from it"
    for f in hub.files:
        parts = f.path.split("/")
        if (
            f.path.startswith(("/", "-"))
            or ".." in parts
            or "" in parts
            or any(ord(c) < 32 or c == "\x7f" for c in f.path)
            or f.size < 0
        ):
            return f"the Hub listed a file named `{f.path[:80]!r}`, which gpubot does not download: nothing is"
    return None


def _there_line(have: list[FetchFile], files: tuple[FetchFile, ...], where: TargetState | None, parts: int) -> str:
    if where is None or (not where.files and not where.parts):
        return "nothing there yet"
    said = f"already there: {len(have)} of {len(files)} files complete ({human_bytes(sum(f.size for f in have))})"
    if where.parts:
        n = len(where.parts)
        said += f", {n} cut part{'s' if n > 1 else ''} of an earlier download ({human_bytes(parts)})"
    extra = sorted(set(where.files) - {f.path for f in files})
    if extra:
        said += f"; {len(extra)} other file{'s' if len(extra) > 1 else ''} there stay as they are"
    return said


def _disk_refusal(report: StatusReport, seen: _Seen, need: int, host: str) -> str:
    avail = seen.avail or 0
    readings = report.readings
    folders = [
        f
        for f in (readings.folders if readings else [])
        if f.state is FolderState.PRESENT
        and f.size_bytes
        and f.path.rstrip("/") != (seen.where.real if seen.where else "")
    ]
    if (
        readings
        and readings.hf_cache
        and readings.hf_cache.state is FolderState.PRESENT
        and readings.hf_cache.size_bytes
    ):
        folders.append(readings.hf_cache)
    named = "; ".join(f"{f.path} ({human_bytes(f.size_bytes)})" for f in folders[:5])
    could = (
        f"; could be deleted: {named} (`/gpu clean {host} weights=PATH`, or `pivot … delete=PATH`)"
        if named
        else "; free space first (`/gpu clean`)"
    )
    return (
        f"not enough disk on {seen.mount or 'the target filesystem'}: {human_bytes(need)} to download, "
        f"{human_bytes(avail)} free ({human_bytes(need - avail)} short){could}"
    )


def _refuse(reasons: list[str]) -> PlanRefused:
    return PlanRefused("refused:\n" + "\n".join(f"• {r}" for r in reasons))
