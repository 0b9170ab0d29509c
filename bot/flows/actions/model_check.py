"""Before a ``start`` or a pivot's ``to=UNIT``: are the unit's model weights on the host, whole, and do they fit its
GPUs?

Two framed round trips (:func:`bot.probing.probes.engine.run_framed`), both read-only:

1. :func:`unit_command`: the unit's ``ExecStart`` and ``Environment`` (``systemctl show``). The model
   argument is found by :func:`bot.probing.probes.servers.served_model` (vLLM, SGLang, TGI, llama.cpp);
   ``CUDA_VISIBLE_DEVICES``, ``HF_HUB_CACHE`` and ``HF_HOME`` come from the Environment.
2. :func:`weights_commands`: for a local path, whether it exists, its real path, the shards that
   ``model.safetensors.index.json`` lists (``weight_map`` values) and which are present with their
   sizes (bytes, ``stat -L``: symlinks into an HF cache's blobs are followed), the weight files
   there (``*.safetensors``, ``*.gguf``, ``*.bin``, ``*.pt``, ``*.pth``; for a ``.gguf`` file its
   split siblings), ``.incomplete`` files (a Hugging Face download still running or cut: under the
   folder, e.g. ``.cache/huggingface/download/``, or in the cache's ``blobs/``), and ``df`` of the
   nearest existing folder. For a hub id (``moonshotai/Kimi-K2.5``), the same for its snapshot in
   the first HF cache holding ``models--ORG--NAME`` (``refs/main``, else the newest snapshot).

Every name from the host is hex-encoded there; every value sent is quoted. Pure apart from the
command text: the planner runs them (:mod:`bot.flows.actions.planner`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from bot.foundation.sizes import human_bytes, human_mib
from bot.probing.probes.disks import parse_df
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import Disk, Gpu
from bot.probing.probes.servers import ServedModel, exec_argv

q = shlex.quote
HEX = "od -An -v -tx1 | tr -d ' \\n'"
MIB = 1 << 20
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}\Z")
"""A Hugging Face repo id as a server's model argument takes it (``org/name``)."""
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
_SPLIT_GGUF = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<parts>\d{5})\.gguf$")


def unit_command(unit: str) -> str:
    """``ExecStart=…`` and ``Environment=…`` of ``unit`` (``systemctl show``'s own lines)."""
    return f"systemctl show -p ExecStart -p Environment -- {q(unit)}"


@dataclass(frozen=True)
class UnitCommand:
    """What :func:`unit_command` read: the ``ExecStart`` argv and the Environment as a dict."""

    argv: list[str]
    env: dict[str, str]
    error: str | None = None

    @property
    def cuda_devices(self) -> tuple[str, ...] | None:
        """``CUDA_VISIBLE_DEVICES`` split at commas (``None``: not set: every GPU is visible)."""
        v = self.env.get("CUDA_VISIBLE_DEVICES")
        return None if v is None else tuple(x.strip() for x in v.split(",") if x.strip())


def parse_unit_command(out: ProbeOutput | None) -> UnitCommand:
    """A :class:`UnitCommand` from :func:`unit_command`'s frame; ``error`` when it could not be read."""
    if out is None or out.exit_status != 0:
        why = ((out.stderr or out.stdout).strip() or f"exit status {out.exit_status}") if out else "no answer"
        return UnitCommand([], {}, error=why.splitlines()[-1][:300])
    argv: list[str] = []
    env: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart" and not argv:
            argv = exec_argv(value)
        elif key == "Environment":
            try:
                words = shlex.split(value)
            except ValueError:
                words = value.split()
            for w in words:
                k, sep, v = w.partition("=")
                if sep:
                    env[k] = v
    return UnitCommand(argv, env)


# --- The weights ---------------------------------------------------------------------------------------
_CHECK_SH = r"""
hx() { printf '%s' "$1" | HEX; }
check() {
  p=$1
  if [ ! -e "$p" ]; then echo exists=no; return 0; fi
  echo exists=yes
  real=$(realpath -e -- "$p" 2>/dev/null || printf '%s' "$p")
  printf 'real=%s\n' "$(hx "$real")"
  if [ -d "$p" ]; then
    echo type=dir
    idx="$p/model.safetensors.index.json"
    if [ -f "$idx" ]; then
      echo index=yes
      printf 'total=%s\n' "$(grep -o '"total_size": *[0-9]*' "$idx" 2>/dev/null | head -n 1 | grep -o '[0-9]*$')"
      grep -o '"[^"/]*\.safetensors"' "$idx" 2>/dev/null | tr -d '"' | sort -u | while IFS= read -r s; do
        if [ -e "$p/$s" ]; then printf 'shard %s %s\n' "$(stat -L -c %s -- "$p/$s" 2>/dev/null || echo x)" "$(hx "$s")"
          printf 'at %s %s\n' "$(hx "$s")" "$(hx "$(realpath -e -- "$p/$s" 2>/dev/null)")"
        else printf 'shard - %s\n' "$(hx "$s")"; fi
      done
    fi
    d=$p
  else
    echo type=file
    d=$(dirname -- "$p")
  fi
  for f in "$d"/*.safetensors "$d"/*.gguf "$d"/*.bin "$d"/*.pt "$d"/*.pth; do
    [ -e "$f" ] || continue
    printf 'file %s %s\n' "$(stat -L -c %s -- "$f" 2>/dev/null || echo x)" "$(hx "${f##*/}")"
    printf 'at %s %s\n' "$(hx "${f##*/}")" "$(hx "$(realpath -e -- "$f" 2>/dev/null)")"
  done
  find "$d" -maxdepth 5 -name '*.incomplete' 2>/dev/null | head -n 20 | while IFS= read -r f; do printf 'incomplete %s\n' "$(hx "$f")"; done
  case $real in */snapshots/*)
    find "${real%/snapshots/*}/blobs" -name '*.incomplete' 2>/dev/null | head -n 20 | while IFS= read -r f; do printf 'incomplete %s\n' "$(hx "$f")"; done;;
  esac
  return 0
}
""".replace("HEX", HEX).strip()  # noqa: E501 (a script sent to the hosts as it stands: its long lines stay)


def weights_commands(model: str, hub_dirs: list[str]) -> list[tuple[str, str]]:
    """The framed commands of the weights check: ``weights`` (``exists=``, ``real=`` hex, ``type=``,
    ``index=yes``, ``total=`` the index's ``total_size`` in bytes, ``shard SIZE|-|x HEXNAME``,
    ``file SIZE HEXNAME``, ``at HEXNAME HEXREAL`` (where a present shard's or file's bytes lie),
    ``incomplete HEXPATH``; for a hub id first ``hub=`` hex of the cache
    and ``snapshot=`` hex of the folder, or ``hub=none``) and ``df`` (``df -P -B1`` of the
    nearest existing folder). ``model`` is a local path (starts with ``/``) or a hub id already
    matched against :data:`HUB_ID`; ``hub_dirs`` are the HF hub caches to look in, in order."""
    if model.startswith("/"):
        body = f"check {q(model)}"
        target = q(model)
    else:
        org, name = model.split("/", 1)
        repo = q(f"models--{org}--{name}")
        dirs = " ".join(q(d) for d in hub_dirs)
        body = "\n".join(
            [
                f"for h in {dirs}; do",
                f'  r="$h"/{repo}; [ -d "$r/snapshots" ] || continue',
                '  printf \'hub=%s\\n\' "$(hx "$h")"',
                '  c=$(cat "$r/refs/main" 2>/dev/null); s="$r/snapshots/$c"',
                '  [ -n "$c" ] && [ -d "$s" ] || s="$r/snapshots/$(ls -t "$r/snapshots" | head -n 1)"',
                '  printf \'snapshot=%s\\n\' "$(hx "$s")"',
                '  check "$s"; find "$r/blobs" -name \'*.incomplete\' 2>/dev/null | head -n 20 | '
                'while IFS= read -r f; do printf \'incomplete %s\\n\' "$(hx "$f")"; done',
                "  exit 0",
                "done",
                "echo hub=none",
            ]
        )
        target = q(hub_dirs[0]) if hub_dirs else "/"
    df = f'd={target}; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname -- "$d"); done; df -P -B1 -- "$d"'
    return [("weights", f"{_CHECK_SH}\n{body}"), ("df", df)]


@dataclass(frozen=True)
class Weights:
    """What :func:`weights_commands` found (sizes in bytes; ``None``: unknown).

    ``path``: the folder or file looked at (for a hub id, its snapshot folder; ``None`` when no
    cache holds it). ``shards``: the index's shard names → size (``None``: missing). ``files``:
    weight files present → size. ``incomplete``: ``.incomplete`` paths. ``disk``: free space
    where the weights are (or would go)."""

    model: str
    path: str | None
    exists: bool | None
    real: str | None = None
    is_dir: bool = False
    hub: str | None = None
    index_total: int | None = None
    shards: dict[str, int | None] = field(default_factory=dict)
    files: dict[str, int | None] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)
    disk: Disk | None = None
    error: str | None = None
    reals: dict[str, str] = field(default_factory=dict)
    """Shard and weight-file names → the real path their bytes lie at (``realpath -e``: symlinks and an HF
    snapshot's links into ``blobs/`` followed)."""

    @property
    def missing_shards(self) -> list[str]:
        """Shards the index names that are not there; for a split GGUF, the parts not there."""
        missing = [s for s, size in self.shards.items() if size is None]
        return missing or self._missing_gguf_parts()

    def _missing_gguf_parts(self) -> list[str]:
        name = (self.real or self.path or "").rsplit("/", 1)[-1]
        m = _SPLIT_GGUF.match(name)
        if not m:
            return []
        parts = int(m["parts"])
        want = [f"{m['stem']}-{i:05d}-of-{m['parts']}.gguf" for i in range(1, parts + 1)]
        return [w for w in want if w not in self.files]

    @property
    def weights_bytes(self) -> int | None:
        """Bytes of the weights a server loads: the index's shards, else the GGUF file (all its split
        parts), else every weight file of the folder; ``None`` when none is known."""
        if self.shards:
            sizes = [s for s in self.shards.values() if s is not None]
            return sum(sizes) if sizes else None
        name = (self.real or self.path or "").rsplit("/", 1)[-1]
        if not self.is_dir and name.endswith(".gguf"):
            m = _SPLIT_GGUF.match(name)
            parts = [
                f for f in self.files if m and f.startswith(m["stem"] + "-") and f.endswith(f"-of-{m['parts']}.gguf")
            ]
            known = [s for f in (parts or [name]) if (s := self.files.get(f)) is not None]
            return sum(known) if known else None
        sizes = [s for s in self.files.values() if s is not None]
        return sum(sizes) if sizes else None


def parse_weights(model: str, outputs: dict[str, ProbeOutput]) -> Weights:
    """A :class:`Weights` from the frames of :func:`weights_commands`. Never raises."""
    o = outputs.get("weights")
    df = outputs.get("df")
    disk = parse_df("?", df) if df is not None else None
    if disk is not None and disk.mount:
        disk = Disk(disk.mount, disk.filesystem, disk.mount, disk.size_bytes, disk.used_bytes, disk.avail_bytes)
    if o is None or o.exit_status != 0:
        why = ((o.stderr or o.stdout).strip() or f"exit status {o.exit_status}") if o else "no answer"
        return Weights(model, None, None, disk=disk, error=why.splitlines()[-1][:300])
    kv: dict[str, str] = {}
    shards: dict[str, int | None] = {}
    files: dict[str, int | None] = {}
    incomplete: list[str] = []
    reals: dict[str, str] = {}
    for line in o.stdout.splitlines():
        words = line.split(" ")
        if words[0] in ("shard", "file") and len(words) == 3:
            name = _unhex(words[2])
            if name is None:
                continue
            size = int(words[1]) if words[1].isdecimal() else None
            if words[0] == "shard":
                shards[name] = size if words[1] != "-" else None
            else:
                files[name] = size
        elif words[0] == "at" and len(words) == 3:
            name, at = _unhex(words[1]), _unhex(words[2])
            if name is not None and at:
                reals[name] = at
        elif words[0] == "incomplete" and len(words) == 2:
            if (p := _unhex(words[1])) is not None and p not in incomplete:
                incomplete.append(p)
        elif "=" in line:
            k, v = line.split("=", 1)
            kv.setdefault(k, v)
    hub = None if kv.get("hub") in (None, "none") else _unhex(kv["hub"])
    if not model.startswith("/") and hub is None:
        return Weights(model, None, False, disk=disk)
    path = _unhex(kv["snapshot"]) if hub is not None and "snapshot" in kv else model
    exists = {"yes": True, "no": False}.get(kv.get("exists", ""))
    total = int(kv["total"]) if kv.get("total", "").isdecimal() else None
    return Weights(
        model,
        path,
        exists,
        _unhex(kv.get("real", "")) or None,
        kv.get("type") == "dir",
        hub,
        total,
        shards,
        files,
        incomplete,
        disk,
        reals=reals,
    )


def _unhex(text: str) -> str | None:
    try:
        return bytes.fromhex(text.strip()).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def weights_problems(w: Weights, *, where: str, host: str, need_bytes: int | None) -> list[str]:
    """Why the weights refuse the plan (empty: they look whole). ``where`` says where the model
    argument came from (``--model of vllm-kimi.service's ExecStart``); each reason names the path,
    what is missing, the free disk there and the ``need=`` a download would take."""
    free = (
        f"{w.disk.path}: {human_bytes(w.disk.avail_bytes)} free"
        if w.disk and w.disk.avail_bytes is not None
        else "free disk unknown"
    )
    asked = f"; need={human_bytes(need_bytes).replace(' ', '')} was asked" if need_bytes is not None else ""
    if w.error:
        return [f"the weights of `{w.model}` ({where}) could not be checked on {host}: {w.error}"]
    if w.path is None:
        return [
            f"`{w.model}` ({where}) is not in any Hugging Face cache on {host}: download it first "
            f"({free}; give need=SIZE of the model so the pivot checks room for it{asked})"
        ]
    if w.exists is False:
        return [
            f"`{w.path}` ({where}) does not exist on {host}: download the weights first "
            f"({free}; give need=SIZE of the model so the pivot checks room for it{asked})"
        ]
    out = []
    missing = w.missing_shards
    if missing:
        named = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        of = (
            f"{len(missing)} of {len(w.shards)} shards named in model.safetensors.index.json"
            if w.shards
            else f"{len(missing)} split GGUF part{'s' if len(missing) > 1 else ''}"
        )
        have = w.weights_bytes or 0
        left = (
            f"; the index says {human_bytes(w.index_total)} in all, {human_bytes(have)} present: about "
            f"{human_bytes(max(0, w.index_total - have))} to download "
            f"(need={human_bytes(max(0, w.index_total - have)).replace(' ', '')})"
            if w.index_total
            else ""
        )
        out.append(f"`{w.path}` ({where}) is incomplete: {of} missing ({named}){left}; {free}")
    if w.incomplete:
        shown = ", ".join(p.rsplit("/", 1)[-1] for p in w.incomplete[:3]) + (
            f" and {len(w.incomplete) - 3} more" if len(w.incomplete) > 3 else ""
        )
        out.append(
            f"`{w.path}` ({where}): a download is still running or was cut: {len(w.incomplete)} .incomplete "
            f"file{'s' if len(w.incomplete) > 1 else ''} ({shown}); {free}"
        )
    if not missing and not w.incomplete and w.weights_bytes is None:
        out.append(
            f"`{w.path}` ({where}) holds no weight file (*.safetensors, *.gguf, *.bin, *.pt): download the "
            f"weights first ({free}{asked})"
        )
    return out


def weights_line(w: Weights, where: str) -> str:
    """The card's line: ``model /shared/Kimi-K2.5-NVFP4 (--model of …) — 540 GB in 64 shards, all present``."""
    shown = w.path if w.hub is None else f"{w.model} (HF cache {w.path})"
    size = human_bytes(w.weights_bytes)
    what = (
        f"{size} in {len(w.shards)} shard{'s' if len(w.shards) != 1 else ''}, all present"
        if w.shards
        else f"{size} of weight files"
    )
    return f"model {shown} ({where}) — {what}"


# --- Fit -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fit:
    """Whether the weights fit the GPUs the unit will use. MiB per GPU; ``fits`` ``None``: not judged
    (``line`` says why)."""

    fits: bool | None
    line: str
    gpus: int = 0
    weights_mib_per_gpu: int | None = None
    kv_mib_per_gpu: int | None = None


def visible_gpus(cuda: tuple[str, ...] | None, gpus: list[Gpu]) -> list[Gpu] | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` names (indexes or UUIDs), in its order; every GPU when it is
    unset; ``None`` when it names a GPU the host does not have (or a MIG instance: not judged)."""
    if cuda is None:
        return list(gpus)
    by_index = {str(g.index): g for g in gpus}
    by_uuid = {g.uuid: g for g in gpus}
    out = []
    for d in cuda:
        g = by_index.get(d) or by_uuid.get(d)
        if g is None:
            return None
        out.append(g)
    return out


def fit(served: ServedModel, weights_bytes: int | None, cuda: tuple[str, ...] | None, gpus: list[Gpu]) -> Fit:
    """Do ``weights_bytes`` fit the GPUs the server will use, with room for the KV cache?

    GPUs used: tensor × pipeline parallel (vLLM, SGLang; default 1), TGI's ``--num-shard`` (default:
    every visible GPU), llama.cpp every visible GPU. Each may take ``memory.total`` ×
    ``gpu_memory_utilization`` (vLLM default 0.9; SGLang ``--mem-fraction-static``; 1.0 where the
    server has no such setting); the weights are split evenly; what is left per GPU is for the KV
    cache (before activations and CUDA graphs, which take a few GiB more). Refuses (``fits`` False)
    when the layout asks for more GPUs than are visible, or the weights exceed the usable memory."""
    if weights_bytes is None:
        return Fit(None, "fit not judged: the weights' size is unknown")
    visible = visible_gpus(cuda, gpus)
    if visible is None:
        return Fit(
            None, f"fit not judged: CUDA_VISIBLE_DEVICES={','.join(cuda or ())} names a GPU the probe did not list"
        )
    if not visible:
        return Fit(
            False,
            "no GPU is visible to the unit ("
            + ("CUDA_VISIBLE_DEVICES is empty)" if cuda is not None else "the probe listed no GPU)"),
        )
    if served.server in ("TGI", "llama.cpp"):
        n = served.tensor_parallel or len(visible)
        layout = f"--num-shard {n}" if served.tensor_parallel else f"all {n} visible GPUs"
    else:
        n = served.gpus_needed
        layout = f"TP {served.tensor_parallel or 1}" + (
            f" × PP {served.pipeline_parallel}" if served.pipeline_parallel else ""
        )
    where = f"CUDA_VISIBLE_DEVICES={','.join(cuda)}" if cuda is not None else f"{len(visible)} GPUs on the host"
    if n > len(visible):
        return Fit(False, f"{served.server} asks for {n} GPUs ({layout}) but {where} gives {len(visible)}", n)
    used = visible[:n]
    totals = [g.memory_total_mib for g in used]
    if any(t is None for t in totals):
        return Fit(None, "fit not judged: a GPU's total memory is unknown", n)
    util = served.gpu_memory_utilization or 1.0
    usable = min(int(t * util) for t in totals if t is not None)
    per = -(-weights_bytes // MIB // n)
    kv = usable - per
    knob = (
        f"--gpu-memory-utilization {util:.2f}"
        if served.server == "vLLM"
        else f"--mem-fraction-static {util:.2f}"
        if served.server == "SGLang"
        else "all of each GPU's memory"
    )
    if not served.utilization_given and served.gpu_memory_utilization is not None:
        knob += " (default)"
    smallest = min(t for t in totals if t is not None)
    head = (
        f"{human_bytes(weights_bytes)} of weights over {n} GPU{'s' if n > 1 else ''} ({layout}) with {knob}: "
        f"{human_mib(per)} of weights per GPU of {human_mib(usable)} usable ({human_mib(smallest)} × {util:.2f})"
    )
    if kv <= 0:
        return Fit(False, f"the weights do not fit: {head}, {human_mib(-kv)} short per GPU", n, per, kv)
    return Fit(True, f"fits: {head}; {human_mib(kv)} left for the KV cache per GPU", n, per, kv)
