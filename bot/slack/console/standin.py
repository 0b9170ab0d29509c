"""A local stand-in for Slack's Web API, for ``gpubot console``.

An aiohttp server on 127.0.0.1 (port 0) that answers the Web API methods gpubot uses
(https://api.slack.com/methods: ``auth.test``, ``chat.postMessage``, ``chat.update``,
``chat.delete``, ``chat.postEphemeral``, ``usergroups.users.list``, ``users.info``, the ``files_upload_v2``
sequence) and the ``response_url`` posts of commands and clicks, and hands every message to
``on_message(kind, message)`` so the console can show it: ``kind`` is ``post``, ``update``,
``delete``, ``ephemeral``, ``replace`` (a ``response_url`` post with ``replace_original``; the message carries
its ``response_key``) or ``file`` (``files`` lists ``id``, ``title``, ``filename`` and the uploaded
``content`` bytes).
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

OnMessage = Callable[[str, dict[str, Any]], Awaitable[None]]


class WebApiStandIn:
    def __init__(self, on_message: OnMessage):
        self.on_message = on_message
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.uploads: dict[str, bytes] = {}
        self.filenames: dict[str, str] = {}

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def response_url(self, key: str) -> str:
        return f"http://127.0.0.1:{self.port}/response/{key}"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/response/{key}", self._response)
        app.router.add_post("/upload/{file_id}", self._upload)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    @staticmethod
    async def _args(request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        elif request.can_read_body:
            args.update(dict(await request.post()))
        for key in ("blocks", "attachments", "files"):
            if isinstance(args.get(key), str):
                with contextlib.suppress(ValueError):
                    args[key] = json.loads(args[key])
        return args

    def _new_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await self._args(request)
        answer: dict[str, Any] = {"ok": True}
        if method == "auth.test":
            answer.update(
                user_id="UCONSOLEBOT", bot_id="BCONSOLE", team_id="TCONSOLE", team="console", url="http://console/"
            )
        elif method == "chat.postMessage":
            ts = self._new_ts()
            answer.update(channel=args.get("channel"), ts=ts, message={"ts": ts})
            await self.on_message("post", {**args, "ts": ts})
        elif method == "chat.update":
            answer.update(channel=args.get("channel"), ts=args.get("ts"))
            await self.on_message("update", args)
        elif method == "chat.delete":
            answer.update(channel=args.get("channel"), ts=args.get("ts"))
            await self.on_message("delete", args)
        elif method == "chat.postEphemeral":
            answer.update(message_ts=self._new_ts())
            await self.on_message("ephemeral", args)
        elif method == "usergroups.users.list":
            answer.update(users=[])
        elif method == "users.info":
            answer.update(user={"id": args.get("user"), "name": "console", "tz": "UTC"})
        elif method == "files.getUploadURLExternal":
            file_id = f"F{next(self._ts):08d}"
            self.filenames[file_id] = str(args.get("filename") or f"{file_id}.bin")
            answer.update(upload_url=f"http://127.0.0.1:{self.port}/upload/{file_id}", file_id=file_id)
        elif method == "files.completeUploadExternal":
            files = args.get("files") or []
            answer.update(files=[{"id": f.get("id"), "title": f.get("title")} for f in files])
            await self.on_message(
                "file",
                {
                    **args,
                    "files": [
                        {
                            **f,
                            "filename": self.filenames.get(f.get("id"), ""),
                            "content": self.uploads.get(f.get("id"), b""),
                        }
                        for f in files
                    ],
                },
            )
        elif method == "files.info":
            answer.update(file={"id": args.get("file")})
        else:
            answer = {"ok": False, "error": "unknown_method"}
        return web.json_response(answer)

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            field = next(iter(form.values()), b"")
            data = field.file.read() if hasattr(field, "file") else bytes(str(field), "utf-8")
        self.uploads[request.match_info["file_id"]] = data
        return web.Response(text="OK")

    async def _response(self, request: web.Request) -> web.Response:
        body = await request.json()
        kind = "ephemeral" if body.get("response_type", "ephemeral") == "ephemeral" else "post"
        if body.get("replace_original"):
            kind = "replace"
        await self.on_message(kind, {**body, "response_key": request.match_info["key"]})
        return web.json_response({"ok": True})
