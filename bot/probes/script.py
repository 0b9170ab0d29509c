"""Build the one remote command that runs a whole probe batch.

Every probe runs under ``LC_ALL=C`` and ``timeout``; each one's output is framed by markers
(:mod:`bot.probes.frames`). Everything that came from configuration or from a user (paths, unit
names) is quoted with :func:`shlex.quote` before it reaches the shell.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass, field
from importlib import resources

from bot.probes.frames import frame_script
from bot.probes.gpu_health import FIELD_FALLBACKS, HEALTH_FIELDS
from bot.probes.gpu_query import retry_query_command
from bot.probes.kernel_log import KERNEL_LOG_COMMAND
from bot.probes.serving import serving_command

GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.reserved",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "mig.mode.current",
    "driver_version",
)
"""``--query-gpu`` fields, in order (names from ``nvidia-smi --help-query-gpu``)."""

FENCE_FIELDS = ("compute_mode",)
"""Asked after the health fields: ``Prohibited`` means an admin fenced the GPU (no CUDA context may
be created on it). The parser reads columns by name, so their place in the row does not matter."""

FABRIC_FIELDS = ("fabric.state", "fabric.status")
"""The GPU's NVLink fabric registration (``nvidia-smi --help-query-gpu``): ``fabric.state`` is
``Not Started``, ``In Progress`` or ``Completed`` on an NVSwitch system (``[N/A]`` elsewhere),
``fabric.status`` is ``Success`` or an error once it completed. Drivers before them refuse the
fields, and the probe drops them (then :data:`FABRIC_COMMAND` reads ``nvidia-smi -q``)."""

OPTIONAL_GPU_FIELDS = ("memory.reserved", *HEALTH_FIELDS, *FENCE_FIELDS, *FABRIC_FIELDS)
"""Fields the GPU probe asks for after :data:`GPU_FIELDS` or drops where the driver refuses them."""

APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")
"""``--query-compute-apps`` fields; the process name is last because it may hold commas."""


@dataclass(frozen=True)
class ProbePlan:
    """What one batch probes on a host.

    ``volumes`` are paths whose filesystem free space is read (``df``); ``folders`` are weight
    folders whose size is read (``du``); ``hf_cache`` is a path, or ``None`` for the SSH user's
    ``$HF_HOME`` or ``~/.cache/huggingface``; ``units`` are systemd unit names.
    ``gpu_backend`` is ``"nvidia-smi"`` or ``"nvml"`` (python3 with nvidia-ml-py on the host).
    ``probe_timeout_s`` bounds each probe, ``gpu_timeout_s`` the GPU probe (``gpus`` or ``nvml``: a
    driver without persistence mode takes ~25-30 s to answer the first call), ``deadline_s`` the whole
    batch on the host (it should end before the client's batch timeout, so what arrived is kept); ``gpu_free_mib`` is the
    memory (MiB) above which a GPU with no listed process has its device-file holders looked up.
    """

    volumes: tuple[str, ...] = ("/",)
    folders: tuple[str, ...] = ()
    hf_cache: str | None = None
    units: tuple[str, ...] = ()
    health_urls: tuple[str | None, ...] = ()
    health_timeout_s: float = 5.0
    probe_timeout_s: int = 20
    gpu_timeout_s: int = 35
    deadline_s: int = 55
    gpu_free_mib: int = 16
    gpu_backend: str = "nvidia-smi"
    marker: str = field(default_factory=lambda: f"GPUBOT-{uuid.uuid4().hex}")


APPS_QUERY = f"nvidia-smi --query-compute-apps={','.join(APP_FIELDS)} --format=csv,noheader,nounits"
"""The compute-process list; run by the GPU probe beside its own query (see :func:`gpu_query_command`)."""

APPS_COMMAND = (
    'if [ -f "$GPUBOT_D/apps.prc" ]; then cat "$GPUBOT_D/apps.pre"; cat "$GPUBOT_D/apps.perr" >&2; '
    'exit "$(cat "$GPUBOT_D/apps.prc")"; fi\n'
    f"exec {APPS_QUERY}"
)
"""The ``apps`` probe: the process list the GPU probe already read (its output, stderr and exit status),
else (the GPU probe was cut before it finished) the query itself."""


def gpu_query_command() -> str:
    """The GPU probe: :data:`GPU_FIELDS`, the health fields, :data:`FENCE_FIELDS` and :data:`FABRIC_FIELDS`,
    asked again without each field this host's driver refuses (see :mod:`bot.probes.gpu_query`, which
    writes the ``# fields:`` and ``# unsupported:`` lines the parser reads), then ``# took: N``: the
    seconds the query took.

    The compute-process query runs at the same time, in the background, into ``$GPUBOT_D/apps.*``
    (the ``apps`` probe prints it): with persistence mode off the driver initializes the GPUs for
    the first client and tears them down when the last one exits, which takes ~25-30 s on an 8-GPU
    host (public Azure ND and forum measurements), so two calls one after the other would pay it
    twice. Run together they share one initialization."""
    query = retry_query_command(dict.fromkeys([*GPU_FIELDS, *HEALTH_FIELDS, *FENCE_FIELDS, *FABRIC_FIELDS]),
                                optional=OPTIONAL_GPU_FIELDS, fallbacks=FIELD_FALLBACKS)
    return (
        "gpubot_t0=$(date +%s)\n"
        f'( {APPS_QUERY} >"$GPUBOT_D/apps.pre" 2>"$GPUBOT_D/apps.perr"; echo $? >"$GPUBOT_D/apps.prc" ) </dev/null &\n'
        f"( {query} ); rc=$?\n"
        'echo "# took: $(( $(date +%s) - gpubot_t0 ))"\n'
        "wait\n"
        "exit $rc\n"
    )


def nvml_command() -> str:
    """The NVML probe: the packaged ``nvml_probe.py`` piped to the host's ``python3``."""
    source = resources.files("bot.probes").joinpath("nvml_probe.py").read_text()
    return f"python3 -c {shlex.quote(source)}"


INVENTORY_COMMAND = r"""
for f in /proc/driver/nvidia/gpus/*/information; do
  [ -r "$f" ] || continue
  printf 'proc %s\n' "${f%/information}"
  grep -E '^(GPU UUID|Bus Location|Model|GPU Excluded):' "$f"
done
sys=${GPUBOT_SYSFS:-/sys}
[ -d "$sys/bus/pci/devices" ] || exit 0
echo pci-scanned
for d in "$sys"/bus/pci/devices/*; do
  v=; read -r v < "$d/vendor" 2>/dev/null; [ "$v" = 0x10de ] || continue
  c=; read -r c < "$d/class" 2>/dev/null
  k=-; [ -L "$d/driver" ] && k=$(readlink "$d/driver") && k=${k##*/}
  case $c in
    0x0300*|0x0302*) printf 'pci %s %s %s\n' "${d##*/}" "$c" "${k:--}";;
    0x0680*) printf 'nvswitch %s %s %s\n' "${d##*/}" "$c" "${k:--}";;
  esac
done
true
""".strip()
"""The GPU inventory's second witnesses, read in the same batch: the GPUs the NVIDIA kernel driver
bound (``/proc/driver/nvidia/gpus/BUS/information``: ``proc PATH`` then its ``GPU UUID:``, ``Bus
Location:``, ``Model:``, ``GPU Excluded:`` lines) and the NVIDIA devices on the PCI bus, read from
sysfs with shell builtins (there even when the driver is not loaded): ``pci BUS CLASS DRIVER`` for
display/3D controllers (class ``0x0300``/``0x0302``), ``nvswitch BUS CLASS DRIVER`` for NVSwitch
bridges (class ``0x0680``, the HGX/DGX baseboards); ``DRIVER`` is the kernel driver bound to the
device (``nvidia``, ``vfio-pci`` for one passed through to a VM; ``-`` for none). ``GPUBOT_SYSFS``
in the host's SSH session names where sysfs is mounted (default ``/sys``; a probe running in a
container that mounts the host's sysfs elsewhere, and the tests' fake hosts). Parsed by
:mod:`bot.probes.inventory`."""

FABRIC_UNIT = "nvidia-fabricmanager.service"
"""The NVIDIA Fabric Manager's systemd unit (package ``nvidia-fabricmanager-<driver branch>``)."""

FABRIC_COMMAND = r"""
grep -q '^nvswitch ' "$GPUBOT_D/inventory.out" 2>/dev/null || exit 0
echo '# unit'
systemctl show -p LoadState,ActiveState,SubState,MainPID -- UNIT; rc=$?
echo "# unit-exit $rc"
if [ ! -f "$GPUBOT_D/gpus.out" ] || grep -q '^# unsupported:.*fabric[.]state' "$GPUBOT_D/gpus.out"; then
  echo '# smi-q'
  nvidia-smi -q | awk '/^GPU [0-9A-Fa-f]+:/ {print; next} /^    Fabric *$/ {f=1; next} f && /^        (State|Status) *:/ {print; next} /^    [^ ]/ {f=0}'
fi
true
""".strip().replace("UNIT", FABRIC_UNIT)
"""The NVSwitch fabric, read only on a host whose PCI scan found NVSwitches: ``systemctl show`` of
:data:`FABRIC_UNIT` after ``# unit`` (``# unit-exit N``: its exit status), and, where this driver
refused the ``fabric.state`` query field, the ``Fabric`` section of ``nvidia-smi -q`` after ``# smi-q``
(``GPU 00000000:18:00.0`` lines, then its ``State :`` and ``Status :``; also with the NVML backend,
which does not read the fabric). Prints nothing on a host
without NVSwitches. Parsed by :func:`bot.probes.inventory.parse_fabric`."""

_OWNERS = r"""
PIDS
src=listed
if [ -z "$pids" ] && HELD; then
  src=device-file
  pids=$(find /proc/[0-9]*/fd -maxdepth 1 -lname '/dev/nvidia[0-9]*' 2>/dev/null | cut -d/ -f3 | sort -un)
  [ "$(id -u)" = 0 ] || echo scan-limited
fi
[ -n "$pids" ] || exit 0
for p in $pids; do echo "pid $p $src"; done
ps -o pid=,user:64=,etimes=,args= -p "$(echo $pids | tr ' ' ,)" 2>/dev/null | cut -c1-460 | sed 's/^ */ps /'
cg=$(for p in $pids; do while IFS= read -r l; do echo "cgroup $p $l"; done < "/proc/$p/cgroup"; done 2>/dev/null)
[ -n "$cg" ] && printf '%s\n' "$cg"
if printf '%s' "$cg" | grep -q '[0-9a-f]\{64\}'; then
  for rt in docker podman; do
    command -v "$rt" >/dev/null 2>&1 || continue
    timeout 5 "$rt" ps --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null | sed 's/^/container /'
  done
fi
true
""".strip()


def owners_command(plan: ProbePlan) -> str:
    """Who holds each GPU, read in the same batch after the GPU probe.

    The PIDs are the ones the GPU probe listed (its output lies in ``$GPUBOT_D``), or, when it
    listed none while some GPU uses more than ``plan.gpu_free_mib`` MiB, the processes that have
    ``/dev/nvidia<N>`` open (the container-PID-namespace case). Prints ``pid PID SOURCE``, one
    ``ps PID USER ELAPSED_S ARGS`` line per live process (USER in a 64-character column: ps's default
    of 8 cut longer names to ``gpubot-t+``), ``cgroup PID LINE`` per cgroup line, and
    ``container ID NAME`` from docker/podman when a cgroup names a container. ``scan-limited``:
    the scan ran without root and saw only the SSH user's processes. Parsed by
    :func:`bot.probes.owners.parse_owners`.
    """
    if plan.gpu_backend == "nvml":
        pids = """pids=$(grep -o '"pid": [0-9]*' "$GPUBOT_D/nvml.out" 2>/dev/null | grep -o '[0-9]*$' | sort -un)"""
        held = """grep -Eq '"used": ([1-9][0-9]{6}|[0-9]{8,})' "$GPUBOT_D/nvml.out" 2>/dev/null"""
    else:
        pids = r"""pids=$(sed -n 's/^[^,]*, *\([0-9][0-9]*\),.*/\1/p' "$GPUBOT_D/apps.out" 2>/dev/null | sort -un)"""
        held = ("awk -F', *' -v t=" + str(int(plan.gpu_free_mib)) + r""" '/^# fields:/ {sub(/^# fields: */, ""); """
                r"""n = split($0, f, ","); for (i = 1; i <= n; i++) if (f[i] == "memory.used") c = i; next} """
                r"""c && $c + 0 > t {x = 1} END {exit !x}' "$GPUBOT_D/gpus.out" 2>/dev/null""")
    return _OWNERS.replace("PIDS", pids, 1).replace("HELD", held, 1)


def probe_commands(plan: ProbePlan) -> list[tuple[str, str]]:
    """``(probe name, sh command)`` pairs in run order. Names are stable identifiers."""
    q = shlex.quote
    cmds: list[tuple[str, str]] = []
    if plan.gpu_backend == "nvml":
        cmds.append(("nvml", nvml_command()))
    else:
        cmds.append(("gpus", gpu_query_command()))
        cmds.append(("apps", APPS_COMMAND))
    for i, vol in enumerate(plan.volumes):
        cmds.append((f"df.{i}", f"df -P -B1 -- {q(vol)}"))
    for i, folder in enumerate(plan.folders):
        cmds.append((f"du.{i}", f"du -sxb -- {q(folder)}"))
    if plan.hf_cache:
        cmds.append(("hf", f"du -sxb -- {q(plan.hf_cache)}"))
    else:
        cmds.append(("hf", 'du -sxb -- "${HF_HOME:-$HOME/.cache/huggingface}"'))
    for i, unit in enumerate(plan.units):
        cmds.append((f"unit.{i}", f"systemctl show -p LoadState,ActiveState,SubState,MainPID -- {q(unit)}"))
    for i, unit in enumerate(plan.units):
        url = plan.health_urls[i] if i < len(plan.health_urls) else None
        cmds.append((f"serve.{i}", serving_command(unit, i, url, plan.health_timeout_s)))
    cmds.append(("inventory", INVENTORY_COMMAND))
    cmds.append(("fabric", FABRIC_COMMAND))
    cmds.append(("owners", owners_command(plan)))
    cmds.append(("kernel_log", KERNEL_LOG_COMMAND))
    cmds.append(("driver", "cat /proc/driver/nvidia/version"))
    cmds.append(("uptime", "cat /proc/uptime"))
    cmds.append(("hostname", "hostname"))
    return cmds


def build_script(plan: ProbePlan) -> str:
    """The whole batch as one POSIX ``sh`` script (framing: :func:`bot.probes.frames.frame_script`). Its
    output leaves the host twice: after the GPU probe and at the end (and at the deadline, if it passes)."""
    gpu_s = max(plan.gpu_timeout_s, plan.probe_timeout_s)
    return frame_script(probe_commands(plan), plan.marker, timeout_s=plan.probe_timeout_s, deadline_s=plan.deadline_s,
                        timeouts={"gpus": gpu_s, "nvml": gpu_s}, send_after=("apps", "nvml"))
