"""A local stand-in for Slack's Web API that records every call.

``SlackApiRecorder`` is an aiohttp server on 127.0.0.1 (random port).  Point a
real ``slack_sdk.web.async_client.AsyncWebClient`` at it with
``base_url=recorder.url`` and every API call is recorded as a
:class:`RecordedCall` and answered with a plausible ``ok`` response.

Routes
------
``GET|POST /api/<method>``
    Slack Web API.  Query string and body (form-encoded, JSON or multipart) are
    merged into ``RecordedCall.body``; JSON strings in form fields such as
    ``blocks``/``attachments``/``view``/``files`` are decoded.  Note that
    slack_sdk sends some methods as GET (``users.info``,
    ``conversations.info``, ``usergroups.users.list``) and some as POST with
    the arguments in the query string (``auth.test``, ``files.*``).
``POST /upload/<file_id>``
    The upload URL handed out by ``files.getUploadURLExternal`` (what
    ``files_upload_v2`` posts the raw bytes to).  Recorded as method
    ``"file_upload"``; bytes are kept in ``recorder.uploads[file_id]``.
``POST /response_url/<id>``
    Slack's ``response_url`` (bolt's ``respond()`` posts JSON here).  Recorded
    as method ``"response_url"``; ``RecordedCall.path`` holds the path.

Canned answers can be replaced per method: ``recorder.responses["chat.postMessage"]
= {"ok": False, "error": "channel_not_found"}`` (a dict, or a callable taking the
RecordedCall and returning a dict, or ``None`` for the canned answer). A dict with
``HTTP_STATUS`` (``"__status__"``) is sent with that HTTP status instead of 200, e.g.
``{"ok": False, "error": "internal_error", "__status__": 500}`` (slack_sdk's retry handlers retry
500-503 and 429).

``recorder.max_block_text = 13_000`` refuses, as Slack does, a ``chat.postMessage`` or
``chat.update`` whose blocks hold more characters of text than that, all blocks together
(``msg_blocks_too_long``; Slack's own threshold is undocumented: about 13,200 observed in
slackapi/bolt-js#2509). Refused calls are recorded and also listed in ``recorder.refused``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict


def block_text_length(blocks: Any) -> int:
    """Characters of every string under a ``text`` key in ``blocks``, all blocks together."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else block_text_length(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(block_text_length(b) for b in blocks)
    return 0


# Form fields that slack_sdk JSON-encodes when it sends form-encoded bodies.
_JSON_FIELDS = ("blocks", "attachments", "view", "files", "metadata", "user_auth_blocks")


@dataclass
class RecordedCall:
    """One request the recorder received."""

    method: str
    body: dict
    headers: CIMultiDict = field(default_factory=CIMultiDict)
    path: str = ""

    @property
    def token(self) -> str | None:
        """Bearer token from the Authorization header, or ``token`` in the body."""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer ") :]
        return self.body.get("token")


Responder = dict | Callable[[RecordedCall], dict | None]
HTTP_STATUS = "__status__"


class SlackApiRecorder:
    """Fake Slack Web API server; use ``async with SlackApiRecorder() as r:``."""

    def __init__(self, *, require_auth: bool = True) -> None:
        #: Answer ``not_authed`` (like Slack) to API calls that carry no token.
        self.require_auth = require_auth
        self.calls: list[RecordedCall] = []
        #: usergroup id -> user ids, served by ``usergroups.users.list``.
        self.usergroups: dict[str, list[str]] = {}
        #: user id -> extra fields merged into ``users.info``'s user.
        self.users: dict[str, dict] = {}
        #: channel id -> extra fields merged into ``conversations.info``'s channel.
        self.channels: dict[str, dict] = {}
        #: per-method overrides of the canned answers.
        self.responses: dict[str, Responder] = {}
        #: file id -> uploaded bytes.
        self.uploads: dict[str, bytes] = {}
        #: file id -> metadata from ``files.getUploadURLExternal``.
        self.files: dict[str, dict] = {}
        #: refuse chat.postMessage/chat.update whose blocks hold more text than this (None: no limit).
        self.max_block_text: int | None = None
        #: the calls refused for ``max_block_text``.
        self.refused: list[RecordedCall] = []
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._changed: asyncio.Condition | None = None
        self._runner: web.AppRunner | None = None
        self.base = ""

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> SlackApiRecorder:
        app = web.Application(client_max_size=100 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_post("/response_url/{id}", self._response_url)
        self._changed = asyncio.Condition()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SlackApiRecorder:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """Base URL in the form slack_sdk's ``base_url`` expects (trailing slash)."""
        return f"{self.base}/api/"

    def response_url(self, id: str = "1") -> str:
        """A response_url that posts back to this recorder."""
        return f"{self.base}/response_url/{id}"

    # -- queries -------------------------------------------------------------

    def calls_of(self, method: str) -> list[RecordedCall]:
        return [c for c in self.calls if c.method == method]

    async def wait_for(
        self,
        method: str,
        predicate: Callable[[RecordedCall], bool] | None = None,
        timeout: float = 5.0,
        *,
        start: int = 0,
    ) -> RecordedCall:
        """Return the first call (from index ``start`` of ``calls``) matching.

        Returns at once if one was already recorded; otherwise wakes on each new
        call.  Raises AssertionError (listing what *was* recorded) on timeout.
        """

        def find() -> RecordedCall | None:
            for c in self.calls[start:]:
                if c.method == method and (predicate is None or predicate(c)):
                    return c
            return None

        assert self._changed is not None, "recorder not started"
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(find), timeout)
        except TimeoutError:
            seen = [c.method for c in self.calls]
            raise AssertionError(f"no {method!r} call matched within {timeout}s; recorded: {seen}") from None
        found = find()
        assert found is not None
        return found

    # -- recording -----------------------------------------------------------

    async def _record(self, call: RecordedCall) -> None:
        self.calls.append(call)
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    @staticmethod
    async def _decode(request: web.Request) -> dict:
        body: dict = dict(request.query)
        ctype = request.content_type
        if request.method == "POST" and request.can_read_body:
            if ctype == "application/json":
                body.update(await request.json())
            elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
                form = await request.post()
                for key in form:
                    values = [v.file.read() if isinstance(v, web.FileField) else v for v in form.getall(key)]
                    body[key] = values[0] if len(values) == 1 else values
        for key in _JSON_FIELDS:
            value = body.get(key)
            if isinstance(value, str) and value[:1] in ("[", "{"):
                body[key] = json.loads(value)
        return body

    # -- handlers ------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        call = RecordedCall(method, await self._decode(request), CIMultiDict(request.headers), request.path)
        await self._record(call)
        if self.require_auth and not call.token:
            return web.json_response({"ok": False, "error": "not_authed"})
        if (
            self.max_block_text is not None
            and method in ("chat.postMessage", "chat.update")
            and block_text_length(call.body.get("blocks")) > self.max_block_text
        ):
            self.refused.append(call)
            return web.json_response({"ok": False, "error": "msg_blocks_too_long"})
        responder = self.responses.get(method) or getattr(self, "_m_" + method.replace(".", "_"), None)
        if responder is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        answer = responder(call) if callable(responder) else responder
        if answer is None:  # a callable override may fall back to the canned answer
            canned = getattr(self, "_m_" + method.replace(".", "_"), None)
            answer = canned(call) if canned else {"ok": False, "error": "unknown_method"}
        answer = dict(answer)
        status = int(answer.pop(HTTP_STATUS, 200))
        return web.json_response(answer, status=status)

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        data = await request.read()
        await self._record(
            RecordedCall(
                "file_upload", {"file_id": file_id, "content": data}, CIMultiDict(request.headers), request.path
            )
        )
        if file_id not in self.files:
            return web.Response(status=404, text="file_not_found")
        self.uploads[file_id] = data
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    async def _response_url(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        await self._record(RecordedCall("response_url", body, CIMultiDict(request.headers), request.path))
        return web.Response(text="ok", content_type="text/plain")

    # -- canned Web API answers (``_m_`` + method with dots as underscores) --

    def _next_ts(self) -> str:
        micros = next(self._ts) * 100
        return f"{1700000000 + micros // 1_000_000}.{micros % 1_000_000:06d}"

    def _message(self, b: dict, ts: str) -> dict:
        msg = {
            "type": "message",
            "user": "UBOT",
            "bot_id": "BBOT",
            "team": "T0001",
            "ts": ts,
            "text": b.get("text", ""),
        }
        for key in ("blocks", "attachments", "thread_ts", "metadata"):
            if key in b:
                msg[key] = b[key]
        return msg

    def _m_auth_test(self, c: RecordedCall) -> dict:
        return {
            "ok": True,
            "url": "https://gpubot-test.slack.com/",
            "team": "gpubot-test",
            "user": "gpubot",
            "team_id": "T0001",
            "user_id": "UBOT",
            "bot_id": "BBOT",
            "is_enterprise_install": False,
        }

    def _m_chat_postMessage(self, c: RecordedCall) -> dict:
        ts = self._next_ts()
        return {"ok": True, "channel": c.body.get("channel"), "ts": ts, "message": self._message(c.body, ts)}

    def _m_chat_update(self, c: RecordedCall) -> dict:
        ts = c.body.get("ts")
        return {
            "ok": True,
            "channel": c.body.get("channel"),
            "ts": ts,
            "text": c.body.get("text", ""),
            "message": self._message(c.body, ts),
        }

    def _m_chat_postEphemeral(self, c: RecordedCall) -> dict:
        return {"ok": True, "message_ts": self._next_ts()}

    def _m_chat_delete(self, c: RecordedCall) -> dict:
        return {"ok": True, "channel": c.body.get("channel"), "ts": c.body.get("ts")}

    def _m_views_open(self, c: RecordedCall) -> dict:
        view = dict(c.body.get("view") or {})
        view.update(id=f"V{next(self._ids):06d}", team_id="T0001", state={"values": {}}, hash="1700000000.abcdef")
        return {"ok": True, "view": view}

    def _m_users_info(self, c: RecordedCall) -> dict:
        uid = c.body.get("user", "")
        name = f"user_{uid.lower()}"
        user = {
            "id": uid,
            "team_id": "T0001",
            "name": name,
            "real_name": name,
            "deleted": False,
            "is_bot": False,
            "tz": "UTC",
            "profile": {"real_name": name, "display_name": name},
        }
        user.update(self.users.get(uid, {}))
        return {"ok": True, "user": user}

    def _m_usergroups_users_list(self, c: RecordedCall) -> dict:
        group = c.body.get("usergroup")
        if group not in self.usergroups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": list(self.usergroups[group])}

    def _m_conversations_info(self, c: RecordedCall) -> dict:
        cid = c.body.get("channel", "")
        channel = {
            "id": cid,
            "name": f"chan-{cid.lower()}",
            "is_channel": True,
            "is_private": False,
            "is_im": False,
            "is_member": True,
            "is_archived": False,
        }
        channel.update(self.channels.get(cid, {}))
        return {"ok": True, "channel": channel}

    def _m_files_getUploadURLExternal(self, c: RecordedCall) -> dict:
        file_id = f"F{next(self._ids):06d}"
        self.files[file_id] = {"id": file_id, "name": c.body.get("filename"), "size": int(c.body.get("length", 0))}
        return {"ok": True, "file_id": file_id, "upload_url": f"{self.base}/upload/{file_id}"}

    def _m_files_completeUploadExternal(self, c: RecordedCall) -> dict:
        done = []
        for f in c.body.get("files") or []:
            if f.get("id") not in self.uploads:
                return {"ok": False, "error": "file_not_found"}
            meta = self.files[f["id"]]
            meta.update(title=f.get("title") or meta["name"], channel=c.body.get("channel_id"))
            done.append({k: meta[k] for k in ("id", "name", "title", "size")})
        return {"ok": True, "files": done}

    def _m_files_info(self, c: RecordedCall) -> dict:
        meta = self.files.get(c.body.get("file", ""))
        return {"ok": True, "file": meta} if meta else {"ok": False, "error": "file_not_found"}

    def _m_files_delete(self, c: RecordedCall) -> dict:
        found = self.files.pop(c.body.get("file", ""), None)
        return {"ok": True} if found else {"ok": False, "error": "file_not_found"}
