"""Does a serving model answer, and how fast? One request to its OpenAI-compatible API, read on the host. Pure.

The request runs on the host (the endpoint usually listens on its loopback): :func:`answer_command` sends the
packaged ``answer_script.py`` to the host's ``python3`` with the request as one JSON argument (quoted). It reads the
served model id (``GET /v1/models``), then asks one streamed chat completion (a completion where chat is not
served: HTTP 400/404/405/501) at temperature 0 with a bounded ``max_tokens``, and prints what happened as JSON
lines; the API key, when the server wants one, is read there (vLLM's ``--api-key`` on the unit's command line, or a
variable of its ``Environment``) and never printed. :func:`parse_answer` reads those lines into an
:class:`AnswerReading` (times in seconds since the completion request was sent), and :func:`judge_answer` turns it
into an :class:`AnswerVerdict`: correct (the expected pattern found), slow (correct, below the minimum tokens per
second), wrong, not served (no OpenAI-compatible API at that address: the unit passes on its health alone), not
checked (no ``python3`` on the host) or failed (the server answered badly: 401, an unknown model, a stream cut
halfway, no token within the bound, not UTF-8, longer than the cap). Every text kept is masked and cut.

Decode speed is ``(tokens - 1) / (last token's time - first token's time)``: the tokens after the first, over the
time they took; ``tokens`` from the server's ``usage`` when it sends one (``stream_options.include_usage``), else
the streamed events that carried text. Fewer than 2 tokens, or an answer not streamed: no speed.
"""

from __future__ import annotations

import enum
import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from bot.foundation.masking import mask_secrets
from bot.foundation.printable import printable

if TYPE_CHECKING:  # only its shape is read: this module stays standard-library only (tools/answer_gpu_check.py)
    from bot.probing.probes.frames import ProbeOutput

DEFAULT_PROMPT = "Count from 1 to 10, separated by commas. Reply with the numbers only."
"""A question any instruction-tuned model answers the same way, long enough (about 20 tokens) to time its decoding."""
DEFAULT_EXPECT = r"\b1\D{1,4}2\D{1,4}3\D{1,4}4\D{1,4}5\D{1,4}6\D{1,4}7\D{1,4}8\D{1,4}9\D{1,4}10\b"
"""What a right answer to :data:`DEFAULT_PROMPT` holds (searched case-insensitively)."""
SHOWN_CHARS = 60
"""An answer is shown cut to this many characters."""
KEPT_CHARS = 300
"""An answer is kept (stored, in the audit) cut to this many characters."""
REASON_CHARS = 500


@dataclass(frozen=True)
class AnswerRequest:
    """The request: ``base`` the server's address (``http://127.0.0.1:8000``), ``model`` (None: the first id
    ``/v1/models`` lists), ``unit`` (whose command line or Environment may hold the API key), ``key`` where the key
    comes from (``auto``: ``--api-key`` on its command line, else ``VLLM_API_KEY``/``OPENAI_API_KEY`` in its
    Environment; ``command``; ``env:NAME``; ``none``); bounds in seconds and bytes."""

    base: str
    prompt: str = DEFAULT_PROMPT
    model: str | None = None
    unit: str | None = None
    key: str = "auto"
    max_tokens: int = 64
    timeout_s: float = 60.0
    first_token_s: float = 30.0
    cap_bytes: int = 256 * 1024


def answer_command(req: AnswerRequest) -> str:
    """The script for the host: ``python3 -c <answer_script.py> <request JSON>``, every value quoted; exit 127
    without ``python3``."""
    source = resources.files("bot.probing.probes").joinpath("answer_script.py").read_text()
    conf = json.dumps(asdict(req), ensure_ascii=True)
    return f"command -v python3 >/dev/null 2>&1 || exit 127\npython3 -c {shlex.quote(source)} {shlex.quote(conf)}"


def base_url(health_url: str | None) -> str | None:
    """``http://127.0.0.1:8000`` from a health URL ``http://127.0.0.1:8000/health`` (scheme, host and port)."""
    if not health_url:
        return None
    m = re.match(r"^(https?://[^/?#]+)", health_url)
    return m.group(1) if m else None


@dataclass(frozen=True)
class AnswerReading:
    """What the host saw. ``exit_status``: the script's (127: no ``python3``); ``models_status``/``status``: HTTP
    statuses of ``/v1/models`` and of the completion request (None: no answer, ``error`` says why); ``api``:
    ``chat`` or ``completion``; ``first_s``/``last_s``: first and last token's time; ``tokens``: the usage's
    ``completion_tokens`` (``tokens_from`` ``usage``) or the events with text (``stream``); ``end``: how the stream
    ended (``done``, ``eof``, ``timeout``, ``first_token_timeout``, ``cap``, ``error``)."""

    exit_status: int | None
    key_source: str | None = None
    models_status: int | None = None
    model_ids: tuple[str, ...] = ()
    model: str | None = None
    api: str | None = None
    status: int | None = None
    streamed: bool = False
    error: str | None = None
    body: str | None = None
    text: str = ""
    reasoning_chars: int = 0
    first_s: float | None = None
    last_s: float | None = None
    tokens: int | None = None
    tokens_from: str | None = None
    finish: str | None = None
    end: str | None = None
    bytes_read: int = 0
    non_utf8: bool = False
    bad_events: int = 0
    stream_error: str | None = None
    asked: bool = False
    timed_out: bool = False


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def parse_answer(out: ProbeOutput | None, *, model: str | None = None) -> AnswerReading:
    """An :class:`AnswerReading` from the script's output (``model``: the one asked for, if any)."""
    if out is None:
        return AnswerReading(None, error="the host did not answer")
    if out.exit_status == 127:
        return AnswerReading(127, error="python3 is not installed on the host")
    doc: dict[str, Any] = {"exit_status": out.exit_status, "model": model}
    text: list[str] = []
    counted = reasoning = bad = 0
    usage: int | None = None
    for line in out.stdout.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        kind = ev.get("ev")
        if kind == "key":
            doc["key_source"] = str(ev.get("source"))[:100]
        elif kind == "models":
            doc["models_status"] = ev.get("status") if isinstance(ev.get("status"), int) else None
            listed = ev.get("ids")
            ids: list[Any] = listed if isinstance(listed, list) else []
            doc["model_ids"] = tuple(str(i)[:200] for i in ids[:20])
            doc["model"] = model or (doc["model_ids"][0] if doc["model_ids"] else None)
            doc["error"] = ev.get("error")
            doc["body"] = ev.get("body")
        elif kind == "request":
            doc.update(
                asked=True,
                api=ev.get("api"),
                status=ev.get("status") if isinstance(ev.get("status"), int) else None,
                streamed=bool(ev.get("stream")),
                error=ev.get("error"),
                body=ev.get("body"),
                timed_out=bool(ev.get("timeout")),
            )
            text, counted, reasoning, bad, usage = [], 0, 0, 0, None
            doc.pop("first_s", None), doc.pop("last_s", None), doc.pop("finish", None)
        elif kind == "chunk":
            if "bad" in ev:
                bad += 1
                continue
            if ev.get("error"):
                doc["stream_error"] = str(ev["error"])[:300]
            piece, thought = str(ev.get("text") or ""), str(ev.get("reasoning") or "")
            if piece or thought:
                counted += 1
                t = ev.get("t")
                if isinstance(t, int | float):
                    doc.setdefault("first_s", float(t))
                    doc["last_s"] = float(t)
            if sum(map(len, text)) < 64 * 1024:
                text.append(piece)
            reasoning += len(thought)
            if ev.get("finish"):
                doc["finish"] = str(ev["finish"])[:40]
        elif kind == "usage":
            n = ev.get("completion_tokens")
            usage = n if isinstance(n, int) and n >= 0 else usage
        elif kind == "end":
            doc.update(
                end=ev.get("why"),
                bytes_read=int(ev.get("bytes") or 0),
                non_utf8=bool(ev.get("non_utf8")),
            )
            if ev.get("error"):
                doc["stream_error"] = str(ev["error"])[:300]
    for k in ("error", "body"):
        if doc.get(k) is not None:
            doc[k] = _cut(mask_secrets(str(doc[k])), 300)
    tokens, source = (usage, "usage") if usage else ((counted, "stream") if counted else (None, None))
    return AnswerReading(
        **doc,
        text="".join(text),
        reasoning_chars=reasoning,
        tokens=tokens,
        tokens_from=source,
        bad_events=bad,
    )


class Outcome(str, enum.Enum):
    """What the check concluded (stored as its value)."""

    CORRECT = "correct"
    SLOW = "slow"
    """Correct, but below the minimum tokens per second."""
    WRONG = "wrong"
    NOT_SERVED = "not_served"
    """No OpenAI-compatible API at that address: nothing to ask."""
    NOT_CHECKED = "not_checked"
    """The check could not run there (no ``python3``, no address known)."""
    FAILED = "failed"
    """The server answered badly (a refusal, an unknown model, a cut stream, no token in time...)."""


PASSES = frozenset({Outcome.CORRECT, Outcome.SLOW, Outcome.NOT_SERVED, Outcome.NOT_CHECKED})
"""Outcomes that let a start pass (on its health alone for the last two)."""


@dataclass(frozen=True)
class AnswerVerdict:
    """The judged check: ``answer`` masked and cut to :data:`KEPT_CHARS`; ``first_token_s`` and ``tok_s`` as
    measured (None: unknown); ``reason``: why it is not correct, or a note (not served, slow)."""

    outcome: Outcome
    answer: str = ""
    first_token_s: float | None = None
    tok_s: float | None = None
    tokens: int | None = None
    model: str | None = None
    api: str | None = None
    reason: str | None = None
    min_tok_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome in PASSES

    @property
    def measured(self) -> bool:
        return self.first_token_s is not None

    def shown(self) -> str:
        """The answer for a card: on one line, cut to :data:`SHOWN_CHARS`."""
        return _cut(" ".join(self.answer.split()), SHOWN_CHARS)

    def figures(self) -> str:
        """``first token 0.21 s · 61 tok/s`` (what was measured)."""
        parts = []
        if self.first_token_s is not None:
            parts.append(f"first token {self.first_token_s:.2f} s")
        if self.tok_s is not None:
            parts.append(f"{self.tok_s:.0f} tok/s" if self.tok_s >= 10 else f"{self.tok_s:.1f} tok/s")
        return " · ".join(parts)

    def text(self) -> str:
        """One line for people: ``answers correctly: «1, 2, 3…» · first token 0.21 s · 61 tok/s``."""
        figures = self.figures()
        tail = f" · {figures}" if figures else ""
        match self.outcome:
            case Outcome.CORRECT:
                return f"answers correctly: «{self.shown()}»{tail}"
            case Outcome.SLOW:
                return f"answers correctly: «{self.shown()}»{tail} — {self.reason}"
            case Outcome.WRONG:
                return f"the model answers, but not correctly: «{self.shown()}»{tail}" + (
                    f" ({self.reason})" if self.reason else ""
                )
            case Outcome.NOT_SERVED | Outcome.NOT_CHECKED:
                return f"answer not checked: {self.reason}; up on its health alone"
            case Outcome.FAILED:
                return f"no correct answer: {self.reason}" + tail

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AnswerVerdict:
        return cls(
            outcome=Outcome(d.get("outcome", "failed")),
            answer=str(d.get("answer") or "")[:KEPT_CHARS],
            first_token_s=d.get("first_token_s"),
            tok_s=d.get("tok_s"),
            tokens=d.get("tokens"),
            model=d.get("model"),
            api=d.get("api"),
            reason=d.get("reason"),
            min_tok_s=d.get("min_tok_s"),
        )


def _speed(r: AnswerReading) -> float | None:
    if not r.streamed or r.first_s is None or r.last_s is None or not r.tokens or r.tokens < 2:
        return None
    span = r.last_s - r.first_s
    return round((r.tokens - 1) / span, 1) if span > 0 else None


_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.S)


def _refused(status: int, where: str, r: AnswerReading) -> str:
    key = r.key_source or "none"
    return (
        f"the API refused the request ({where}: HTTP {status}; API key: {key}): give the unit's answer setting "
        "api_key (command, env:NAME)"
    )


def judge_answer(
    r: AnswerReading,
    *,
    base: str,
    request: AnswerRequest,
    expect: str = DEFAULT_EXPECT,
    min_tok_s: float | None = None,
) -> AnswerVerdict:
    """The verdict of one reading (see :class:`Outcome`); ``expect`` is searched case-insensitively in the answer
    (reasoning in ``<think>`` left out)."""
    # cut before masking too: the masking patterns are slow on one long word (a 10 MB answer of "xxx…")
    answer = _cut(printable(mask_secrets(_THINK.sub("", r.text).strip()[: 2 * KEPT_CHARS])).strip(), KEPT_CHARS)
    speed = _speed(r)
    common: dict[str, Any] = dict(
        answer=answer,
        first_token_s=round(r.first_s, 3) if r.first_s is not None else None,
        tok_s=speed,
        tokens=r.tokens,
        model=_cut(r.model, 200) if r.model else None,
        api=r.api,
        min_tok_s=min_tok_s,
    )

    def verdict(outcome: Outcome, reason: str | None = None) -> AnswerVerdict:
        return AnswerVerdict(outcome, reason=_cut(reason, REASON_CHARS) if reason else None, **common)

    if r.exit_status == 127:
        return verdict(Outcome.NOT_CHECKED, "python3 is not installed on the host, and the request runs there")
    if r.models_status is None and not r.asked:
        if r.exit_status not in (0, None):
            return verdict(Outcome.FAILED, f"the check stopped on the host (exit status {r.exit_status})")
        return verdict(Outcome.NOT_SERVED, f"nothing answers at {base} ({r.error or 'no answer'})")
    if r.models_status in (404, 405) and not r.asked:
        return verdict(Outcome.NOT_SERVED, f"{base}/v1/models: HTTP {r.models_status}: no OpenAI-compatible API there")
    if r.models_status in (401, 403) and not r.asked:
        return verdict(Outcome.FAILED, _refused(r.models_status, "/v1/models", r))
    if r.models_status != 200 and not r.asked:
        return verdict(Outcome.FAILED, f"{base}/v1/models: HTTP {r.models_status}" + (f": {r.body}" if r.body else ""))
    if not r.asked:
        return verdict(Outcome.FAILED, f"{base}/v1/models lists no model")
    what = f"the {r.api or 'chat'} completion"
    if r.status is None and r.timed_out:
        return verdict(Outcome.FAILED, f"no token within {request.first_token_s:g} s (the request got no answer)")
    if r.status is None:
        return verdict(Outcome.FAILED, f"{what} request got no answer ({r.error or 'no answer'})")
    if r.status in (401, 403):
        return verdict(Outcome.FAILED, _refused(r.status, what, r))
    if r.status == 404:
        return verdict(Outcome.FAILED, f"model «{r.model}» not found (HTTP 404)" + (f": {r.body}" if r.body else ""))
    if r.status != 200:
        return verdict(Outcome.FAILED, f"{what}: HTTP {r.status}" + (f": {r.body}" if r.body else ""))
    if r.non_utf8:
        return verdict(Outcome.FAILED, "the answer is not valid UTF-8")
    if r.end == "cap":
        return verdict(
            Outcome.FAILED,
            f"the answer is longer than {request.cap_bytes // 1024} KiB ({request.max_tokens} tokens asked): "
            "reading stopped there",
        )
    if r.end == "first_token_timeout" or (r.first_s is None and r.end == "timeout"):
        return verdict(Outcome.FAILED, f"no token within {request.first_token_s:g} s")
    if r.stream_error:
        return verdict(Outcome.FAILED, f"the server reported an error while answering: {r.stream_error}")
    matched = bool(answer) and re.search(expect, _THINK.sub("", r.text), re.I | re.S) is not None
    if r.end == "error" or (r.end == "eof" and r.streamed):
        got = f"{r.tokens} token{'s' if r.tokens != 1 else ''}" if r.tokens else "no token"
        return verdict(Outcome.FAILED, f"the stream was cut after {got} (no [DONE])")
    if r.end == "timeout" and not matched:
        return verdict(Outcome.FAILED, f"the answer did not end within {request.timeout_s:g} s")
    if r.bad_events and not answer:
        return verdict(Outcome.FAILED, f"{r.bad_events} streamed event(s) were not JSON")
    if not matched:
        if not answer and r.reasoning_chars and r.finish == "length":
            return verdict(
                Outcome.WRONG,
                f"still reasoning when max_tokens ({request.max_tokens}) ran out: "
                "raise max_tokens in its answer setting",
            )
        return verdict(Outcome.WRONG, "empty answer" if not answer else None)
    if min_tok_s is not None and speed is not None and speed < min_tok_s:
        return verdict(Outcome.SLOW, f"slow: {speed:g} tok/s, under the minimum {min_tok_s:g}")
    return verdict(Outcome.CORRECT)
