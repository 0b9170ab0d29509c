# Runs ON THE GPU HOST as `python3 -c <this file> CONFIG_JSON`; standard library only.
# Asks a model server's OpenAI-compatible API one question and prints what happened as JSON lines
# (ASCII only), read by bot/probing/probes/answer.py:
#   {"ev": "key", "source": ...}            where the API key came from (never the key)
#   {"ev": "models", "status": N, "ids": [...], "error": ...}
#   {"ev": "request", "api": "chat"|"completion", "status": N, "t": s, "stream": bool, "body": ...}
#   {"ev": "chunk", "t": s, "text": ..., "reasoning": ..., "finish": ...}   one per streamed event
#   {"ev": "usage", "completion_tokens": N, "prompt_tokens": N}
#   {"ev": "end", "t": s, "why": "done"|"eof"|"timeout"|"first_token_timeout"|"cap"|"error", "bytes": N,
#    "non_utf8": bool, "error": ...}
# CONFIG: {"base": "http://127.0.0.1:8000", "model": id|null, "prompt", "max_tokens", "timeout_s",
# "first_token_s", "cap_bytes", "unit", "key": "auto"|"command"|"none"|"env:NAME"}.
# Times are seconds since the completion request was sent. At most cap_bytes of the answer are read.
from __future__ import annotations

import contextlib
import http.client
import json
import shlex
import socket
import subprocess
import sys
import time
import urllib.parse
from typing import Any

CONF = json.loads(sys.argv[1])
CAP = int(CONF.get("cap_bytes", 65536))
KEY_ENVS = ("VLLM_API_KEY", "OPENAI_API_KEY")


def say(**doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def show(unit: str, prop: str) -> str:
    try:
        out = subprocess.run(
            ["systemctl", "show", "-p", prop, "--value", "--", unit], capture_output=True, timeout=10, check=False
        )
        return out.stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return ""


def argv_of(exec_start: str) -> list[str]:
    text = exec_start.strip()
    if "argv[]=" in text:
        text = text.split("argv[]=", 1)[1].split(" ; ", 1)[0]
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def env_of(unit: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in argv_of(show(unit, "Environment")) if unit else []:
        name, eq, value = word.partition("=")
        if eq:
            out[name] = value
    return out


def api_key() -> tuple[str | None, str]:
    """(key or None, where it came from): the unit's ``--api-key``, or an variable of its Environment."""
    how, unit = CONF.get("key") or "auto", CONF.get("unit") or ""
    if how == "none" or not unit:
        return None, "none"
    if how in ("auto", "command"):
        argv = argv_of(show(unit, "ExecStart"))
        for i, a in enumerate(argv):
            if a == "--api-key" and i + 1 < len(argv):
                return argv[i + 1], "its command line's --api-key"
            if a.startswith("--api-key="):
                return a.split("=", 1)[1], "its command line's --api-key"
        if how == "command":
            return None, "its command line has no --api-key"
    env = env_of(unit)
    names = [how[4:]] if how.startswith("env:") else list(KEY_ENVS)
    for name in names:
        if env.get(name):
            return env[name], f"{name} in its Environment"
    return None, "none" if how == "auto" else f"{names[0]} not in its Environment"


def connect(timeout: float) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(CONF["base"])
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, u.port, timeout=timeout), u.path.rstrip("/")


def headers(key: str | None, body: bool = True) -> dict[str, str]:
    h: dict[str, str] = {"Accept": "application/json, text/event-stream"}
    if body:
        h["Content-Type"] = "application/json"
    if key:
        h["Authorization"] = "Bearer " + key
    return h


def text_of(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), True


def models(key: str | None) -> tuple[int, list[str]] | None:
    conn, prefix = connect(float(CONF.get("first_token_s", 30)))
    try:
        conn.request("GET", prefix + "/v1/models", headers=headers(key, body=False))
        resp = conn.getresponse()
        raw = resp.read(CAP)
    except (OSError, http.client.HTTPException) as exc:
        say(ev="models", status=None, ids=[], error=f"{type(exc).__name__}: {exc}"[:300])
        return None
    finally:
        conn.close()
    body, _ = text_of(raw)
    ids = []
    with contextlib.suppress(ValueError, AttributeError):
        ids = [str(m.get("id")) for m in json.loads(body).get("data", []) if isinstance(m, dict)][:20]
    say(ev="models", status=resp.status, ids=ids, body=body[:300] if resp.status != 200 else None)
    return resp.status, ids


def payload(api: str, model: str) -> bytes:
    doc: dict[str, Any] = {
        "model": model,
        "max_tokens": int(CONF.get("max_tokens", 64)),
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        doc["messages"] = [{"role": "user", "content": CONF["prompt"]}]
    else:
        doc["prompt"] = CONF["prompt"]
    return json.dumps(doc).encode()


def event(data: str, t: float) -> bool:
    """One ``data:`` event's JSON: a chunk and/or the usage; True when it carried a token."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        say(ev="chunk", t=t, bad=data[:200])
        return False
    token = False
    if isinstance(doc.get("error"), (dict, str)):
        e = doc["error"]
        say(ev="chunk", t=t, error=str(e.get("message", e) if isinstance(e, dict) else e)[:300])
    for c in (doc.get("choices") or [])[:1]:
        if not isinstance(c, dict):
            continue
        d = c.get("delta") if isinstance(c.get("delta"), dict) else c.get("message") or {}
        text = d.get("content") if isinstance(d, dict) else None
        if text is None:
            text = c.get("text")
        reasoning = (d.get("reasoning_content") or d.get("reasoning")) if isinstance(d, dict) else None
        text = text if isinstance(text, str) else ""
        reasoning = reasoning if isinstance(reasoning, str) else ""
        token = bool(text or reasoning)
        say(ev="chunk", t=t, text=text, reasoning=reasoning, finish=c.get("finish_reason"))
    u = doc.get("usage")
    if isinstance(u, dict):
        say(ev="usage", completion_tokens=u.get("completion_tokens"), prompt_tokens=u.get("prompt_tokens"))
    return token


def ask(api: str, model: str, key: str | None) -> int | None:
    """One streamed completion; returns the status, or None when the request could not be sent."""
    first_s, total_s = float(CONF.get("first_token_s", 30)), float(CONF.get("timeout_s", 60))
    conn, prefix = connect(first_s)
    path = prefix + ("/v1/chat/completions" if api == "chat" else "/v1/completions")
    t0 = time.monotonic()

    def t() -> float:
        return round(time.monotonic() - t0, 4)

    try:
        conn.request("POST", path, body=payload(api, model), headers=headers(key))
        resp = conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        late = isinstance(exc, socket.timeout)
        say(ev="request", api=api, status=None, t=t(), error=f"{type(exc).__name__}: {exc}"[:300], timeout=late)
        conn.close()
        return None
    stream = "text/event-stream" in (resp.getheader("Content-Type") or "")
    if resp.status != 200:
        body, _ = text_of(resp.read(4096))
        say(ev="request", api=api, status=resp.status, t=t(), stream=stream, body=body[:300])
        conn.close()
        return resp.status
    say(ev="request", api=api, status=200, t=t(), stream=stream)
    seen, bad, why, got_token, error = 0, False, "eof", False, None
    try:
        if not stream:  # a server that answers in one JSON document
            raw = resp.read(CAP + 1)
            seen = len(raw)
            body, bad = text_of(raw[:CAP])
            if seen > CAP:
                why = "cap"
            else:
                event(body, t())
                why = "done"
        else:
            while True:
                left = total_s - (time.monotonic() - t0)
                wait = min(left, first_s - (time.monotonic() - t0)) if not got_token else left
                if wait <= 0:
                    why = "timeout" if got_token else "first_token_timeout"
                    break
                if conn.sock is not None:
                    conn.sock.settimeout(wait)
                line = resp.readline(CAP - seen + 1)
                if not line:
                    break
                seen += len(line)
                if seen > CAP:
                    why = "cap"
                    break
                text, odd = text_of(line)
                bad = bad or odd
                text = text.strip()
                if not text.startswith("data:"):
                    continue
                data = text[5:].strip()
                if data == "[DONE]":
                    why = "done"
                    break
                got_token = event(data, t()) or got_token
    except socket.timeout:  # noqa: UP041 (TimeoutError only from Python 3.10; hosts may run older)
        why = "timeout" if got_token else "first_token_timeout"
    except (OSError, http.client.HTTPException) as exc:
        why, error = "error", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        conn.close()
    say(ev="end", t=t(), why=why, bytes=seen, non_utf8=bad, error=error)
    return 200


def main() -> None:
    key, source = api_key()
    say(ev="key", source=source)
    listed = models(key)
    if listed is None:
        return
    status, ids = listed
    if status != 200 and not CONF.get("model"):
        return
    model = CONF.get("model") or (ids[0] if ids else None)
    if model is None:
        say(ev="request", api="chat", status=None, t=0, error="the server lists no model")
        return
    got = ask("chat", model, key)
    if got in (400, 404, 405, 501) and not CONF.get("chat_only"):
        ask("completion", model, key)


main()
