"""Model servers' command lines: which server a unit runs, its health URL, its model and its GPU layout. Pure.

The argv comes from ``systemctl show -p ExecStart --value`` (``{ path=… ; argv[]=A B C ; … }``, see
:func:`exec_argv`) or from ``/proc/PID/cmdline``. Servers known: vLLM (``vllm serve MODEL``,
``python -m vllm.entrypoints.openai.api_server --model MODEL``), SGLang (``--model-path``), TGI
(``text-generation-launcher --model-id``) and llama.cpp's ``llama-server`` (``-m``/``--model``). Their
options are as each one's ``--help`` documents them (vLLM 0.11, SGLang 0.5, TGI 3.3, llama.cpp b6000).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

SERVERS: list[tuple[str, tuple[str, ...], int]] = [
    ("vLLM", ("vllm serve", "vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"), 8000),
    ("SGLang", ("sglang.launch_server", "sglang serve"), 30000),
    ("TGI", ("text-generation-launcher",), 3000),
    ("llama.cpp", ("llama-server",), 8080),
]
"""Servers whose health endpoint is ``/health`` on their ``--port``: (name, how to recognise it in
argv, default port)."""

WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "", "*")
"""``--host`` values that mean "every address": the health URL then asks 127.0.0.1."""


def exec_argv(exec_start: str) -> list[str]:
    """The argv of ``systemctl show -p ExecStart --value`` (``{ path=… ; argv[]=A B C ; … }``,
    one block per command; the first one's), or of a plain command line."""
    text = exec_start.strip()
    if "argv[]=" in text:
        text = text.split("argv[]=", 1)[1].split(" ; ", 1)[0]
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def option(argv: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` given in ``argv`` (``--port 8000`` or ``--port=8000``;
    a short ``-m x``), ``None`` when none is."""
    for i, a in enumerate(argv):
        for name in names:
            if a == name and i + 1 < len(argv):
                return argv[i + 1]
            if name.startswith("--") and a.startswith(name + "="):
                return a.split("=", 1)[1]
    return None


def server_of(argv: list[str]) -> str | None:
    """Which known server ``argv`` runs (``"vLLM"``, ``"SGLang"``, ``"TGI"``, ``"llama.cpp"``), else ``None``."""
    words = [os.path.basename(a) if i == 0 or "/" in a else a for i, a in enumerate(argv)]
    joined = " " + " ".join(words) + " "
    for name, marks, _ in SERVERS:
        if any(f" {m} " in joined or f"/{m} " in joined for m in marks):
            return name
    return None


def default_url(argv: list[str]) -> tuple[str, str] | None:
    """``(url, source)`` of a well-known model server's health endpoint from its argv, e.g.
    ``vllm serve M --port 8001`` → ``("http://127.0.0.1:8001/health", "vLLM default, port from
    its command line")``; ``None`` when the argv is no server we know. A ``--host`` other than
    a wildcard address is kept (IPv6 in brackets)."""
    name = server_of(argv)
    if name is None:
        return None
    port = next(p for n, _, p in SERVERS if n == name)
    given = option(argv, "--port")
    if given is not None and not (given.isdecimal() and 0 < int(given) < 65536):
        return None
    host = option(argv, "--host") or "127.0.0.1"
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    if not all(c.isalnum() or c in ".-:[]" for c in host):
        return None
    how = "port from its command line" if given else f"its default port {port}"
    return f"http://{host}:{given or port}/health", f"{name} default, {how}"


def url_awk() -> str:
    """An ``awk`` program that reads ``ExecStart``'s value on stdin and prints what
    :func:`default_url` gives for it (nothing for no known server), so the status batch can ask a
    running server's health in its one round trip. Built from :data:`SERVERS`; words are split at
    spaces (a quoted argument holding a space reads differently: the batch compares the URL it
    used with :func:`default_url`'s and says when they differ)."""
    checks = []
    for _, marks, port in SERVERS:
        cond = " || ".join(f'index(j, " {m} ") || index(j, "/{m} ")' for m in marks)
        checks.append(f"if (!d && ({cond})) d = {port}")
    return (
        '{ s = $0; k = index(s, "argv[]="); if (k) { s = substr(s, k + 7); k = index(s, " ; "); if (k) s = '
        "substr(s, 1, k - 1) } "
        'n = split(s, a, " "); j = " "; '
        'for (i = 1; i <= n; i++) { w = a[i]; if (i == 1 || w ~ /\\//) sub(/.*\\//, "", w); j = j w " " } '
        "d = 0; " + "; ".join(checks) + "; if (!d) exit; "
        'p = ""; h = ""; gp = 0; gh = 0; '
        "for (i = 1; i <= n; i++) { "
        'if (!gp && a[i] == "--port" && i < n) { p = a[i + 1]; gp = 1 } else if (!gp && substr(a[i], 1, 7) '
        '== "--port=") { p = substr(a[i], 8); gp = 1 } '
        'if (!gh && a[i] == "--host" && i < n) { h = a[i + 1]; gh = 1 } else if (!gh && substr(a[i], 1, 7) '
        '== "--host=") { h = substr(a[i], 8); gh = 1 } } '
        "if (gp && !(p ~ /^[0-9]+$/ && p + 0 > 0 && p + 0 < 65536)) exit; "
        'if (h == "" || h == "0.0.0.0" || h == "::" || h == "[::]" || h == "*") h = "127.0.0.1"; '
        'if (index(h, ":") && substr(h, 1, 1) != "[") h = "[" h "]"; '
        "if (h !~ /^[][A-Za-z0-9.:-]+$/) exit; "
        'print "http://" h ":" (gp ? p : d) "/health"; exit }'
    )


# --- The model a server loads, and how it spreads over GPUs ------------------------------------------
MODEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "vLLM": ("--model",),
    "SGLang": ("--model-path", "--model"),
    "TGI": ("--model-id",),
    "llama.cpp": ("-m", "--model"),
}
"""Per server, the options that name the model (vLLM's ``serve`` also takes it as its first positional)."""

_VLLM_VALUE_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--config",
        "--served-model-name",
        "--tensor-parallel-size",
        "-tp",
        "--pipeline-parallel-size",
        "-pp",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--dtype",
        "--quantization",
        "-q",
        "--download-dir",
        "--tokenizer",
        "--revision",
    }
)
"""vLLM options that take a value: a positional after ``vllm serve`` is the model only when it is
not one of these options' values (``vllm serve --port 8000 /models/x``)."""


@dataclass(frozen=True)
class ServedModel:
    """The model a server's command line names, and the layout it asks for.

    ``model``: the argument as written (a local path when it starts with ``/``, else a hub id such
    as ``moonshotai/Kimi-K2.5``); ``local``: it is a path. ``tensor_parallel`` / ``pipeline_parallel``:
    the sizes given (``None``: not given; the server's default is 1). ``gpu_memory_utilization``: the
    fraction of each GPU's memory the server may use for weights and KV cache (vLLM
    ``--gpu-memory-utilization``, default 0.9; SGLang ``--mem-fraction-static``, whose default
    depends on the GPU, taken as 0.9; ``None`` for servers without one: TGI, llama.cpp).
    ``utilization_given``: the fraction was on the command line (else the default)."""

    server: str
    model: str
    option: str
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    gpu_memory_utilization: float | None = None
    utilization_given: bool = False

    @property
    def local(self) -> bool:
        return self.model.startswith("/")

    @property
    def gpus_needed(self) -> int:
        """GPUs the layout uses: tensor × pipeline parallel (1 each when not given)."""
        return (self.tensor_parallel or 1) * (self.pipeline_parallel or 1)


def _positive_int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdecimal() and int(text) > 0 else None


def _fraction(text: str | None) -> float | None:
    try:
        v = float(text) if text is not None else None
    except ValueError:
        return None
    return v if v is not None and 0 < v <= 1 else None


def served_model(argv: list[str]) -> ServedModel | None:
    """The model and layout of a known server's ``argv`` (see :class:`ServedModel`); ``None`` when
    ``argv`` is no server we know or names no model.

    vLLM: ``vllm serve MODEL`` (first positional after ``serve``) or ``--model``;
    ``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``, ``--gpu-memory-utilization``.
    SGLang: ``--model-path`` (or ``--model``), ``--tp-size``/``--tp``, ``--pp-size``, ``--mem-fraction-static``.
    TGI: ``--model-id``, ``--num-shard``. llama.cpp: ``-m``/``--model`` (a GGUF file); no tensor parallel.
    """
    server = server_of(argv)
    if server is None:
        return None
    model, how = None, ""
    for name in MODEL_OPTIONS[server]:
        if (value := option(argv, name)) is not None:
            model, how = value, name
            break
    if model is None and server == "vLLM":
        words = [os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)]
        if "serve" in words:
            rest = argv[words.index("serve") + 1 :]
            i = 0
            while i < len(rest):
                a = rest[i]
                if a.startswith("-"):
                    i += 1 if "=" in a or a not in _VLLM_VALUE_FLAGS else 2
                    continue
                model, how = a, "positional"
                break
    if not model:
        return None
    if server == "vLLM":
        tp, pp = option(argv, "--tensor-parallel-size", "-tp"), option(argv, "--pipeline-parallel-size", "-pp")
        util = option(argv, "--gpu-memory-utilization")
        default: float | None = 0.9
    elif server == "SGLang":
        tp, pp = (
            option(argv, "--tp-size", "--tp", "--tensor-parallel-size"),
            option(argv, "--pp-size", "--pipeline-parallel-size"),
        )
        util, default = option(argv, "--mem-fraction-static"), 0.9
    elif server == "TGI":
        tp, pp, util, default = option(argv, "--num-shard"), None, None, None
    else:
        tp, pp, util, default = None, None, None, None
    fraction = _fraction(util)
    return ServedModel(
        server,
        model,
        how,
        _positive_int(tp),
        _positive_int(pp),
        fraction if fraction is not None else default,
        utilization_given=fraction is not None,
    )
