"""A stand-in for the Hugging Face Hub on loopback, serving what the real ``huggingface_hub`` client
asks for when it downloads a model (read in its source, version 2.4: ``HfApi.model_info``,
``HfApi.list_repo_tree``, ``get_hf_file_metadata`` and ``http_get``):

* ``GET /api/models/ORG/NAME/revision/REV`` (``?blobs=True``: files with sizes and LFS sha256):
  ``{"id", "sha", "gated", "siblings": [{"rfilename", "size", "blobId", "lfs": {...}}]}``;
* ``GET /api/models/ORG/NAME/tree/REV?recursive=True``: ``[{"type": "file", "path", "size",
  "oid", "lfs": {"oid", "size", "pointerSize"}}]`` (one page: no ``Link`` header);
* ``HEAD``/``GET /ORG/NAME/resolve/REV/PATH``: ``X-Repo-Commit``, ``ETag`` (an LFS file's sha256,
  else its git blob id), ``X-Linked-Etag``/``X-Linked-Size`` for LFS files, ``Content-Length``;
  ``Range: bytes=N-`` answers 206 with ``Content-Range`` (the client resumes a cut download so).

Errors as the Hub says them, in ``X-Error-Code``: an unknown repo ``401 RepoNotFound``, an unknown
revision ``404 RevisionNotFound``, a gated repo without the right token ``401 GatedRepo`` (``403``
with a token that has no access). Knobs for tests: ``rate`` (bytes per second per response, 0: as
fast as it goes), ``hold`` (an :class:`asyncio.Event`: data stops flowing while it is clear;
:meth:`pause`, :meth:`resume`),
``gate_after`` (with ``hold`` clear, each file's first ``gate_after`` bytes flow, then it waits),
``corrupt`` (a file served with other bytes of the same size: its advertised sha256 no longer
matches), ``requests`` (every ``(method, path, range)`` seen).

Runs in a thread of its own with its own event loop (:class:`FakeHub` is a context manager), so a
test's blocking calls never stall it.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Repo:
    """One model repo: ``files`` path → bytes; ``lfs``: paths stored in LFS (their sha256 is published)."""

    files: dict[str, bytes]
    lfs: set[str] = field(default_factory=set)
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    revisions: tuple[str, ...] = ("main",)
    claimed: dict[str, int] = field(default_factory=dict)
    """Sizes the metadata claims instead of the real ones (a repo too big for the disk, never downloaded)."""


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    """``with FakeHub({"org/name": Repo(...)}, token="hf_good") as hub: hub.url``."""

    def __init__(self, repos: dict[str, Repo], *, token: str | None = None, host: str = "127.0.0.1"):
        self.repos = repos
        self.token = token
        self.host = host
        self.rate = 0
        self.gate_after: int | None = None
        self.cut_once: dict[str, int] = {}
        """path → offset: the next GET of that file to start has its connection dropped at that offset."""
        self.corrupt: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self.hold: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- control from the test's thread ---------------------------------------------------------
    def pause(self) -> None:
        """Stop data flowing (responses already started wait mid-body)."""
        assert self._loop is not None and self.hold is not None
        self._loop.call_soon_threadsafe(self.hold.clear)

    def resume(self) -> None:
        assert self._loop is not None and self.hold is not None
        self._loop.call_soon_threadsafe(self.hold.set)

    def ranges(self, path_end: str) -> list[str | None]:
        """The ``Range`` headers of the GETs of a file whose path ends with ``path_end``."""
        return [r for m, p, r in self.requests if m == "GET" and p.endswith(path_end) and "/resolve/" in p]

    # --- the app ----------------------------------------------------------------------------------
    def _repo(self, request: web.Request) -> tuple[str, Repo] | web.Response:
        repo_id = f"{request.match_info['org']}/{request.match_info['name']}"
        repo = self.repos.get(repo_id)
        if repo is None:
            return _error(401, "RepoNotFound", "Repository not found")
        if repo.gated:
            auth = request.headers.get("Authorization", "")
            if not auth:
                return _error(401, "GatedRepo", "Access to model is restricted. You must have access to it.")
            if auth != f"Bearer {self.token}":
                return _error(403, "GatedRepo", "Access to model is restricted and you are not in the authorized list.")
        rev = request.match_info.get("rev", "main")
        if rev not in repo.revisions and rev != repo.sha:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return repo_id, repo

    def _entries(self, repo: Repo) -> list[dict]:
        out = []
        for path, data in repo.files.items():
            size = repo.claimed.get(path, len(data))
            e: dict = {"type": "file", "path": path, "size": size, "oid": _git_oid(data)}
            if path in repo.lfs:
                e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": size, "pointerSize": 134}
            out.append(e)
        return out

    async def _info(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path, None))
        got = self._repo(request)
        if isinstance(got, web.Response):
            return got
        repo_id, repo = got
        siblings = []
        for e in self._entries(repo):
            s: dict = {"rfilename": e["path"]}
            if request.query.get("blobs"):
                s |= {"size": e["size"], "blobId": e["oid"]}
                if "lfs" in e:
                    s["lfs"] = {"size": e["size"], "sha256": e["lfs"]["oid"], "pointerSize": 134}
            siblings.append(s)
        return web.json_response(
            {
                "_id": "x",
                "id": repo_id,
                "modelId": repo_id,
                "sha": repo.sha,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "tags": [],
                "siblings": siblings,
            }
        )

    async def _tree(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path, None))
        got = self._repo(request)
        if isinstance(got, web.Response):
            return got
        return web.json_response(self._entries(got[1]))

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path, request.headers.get("Range")))
        got = self._repo(request)
        if isinstance(got, web.Response):
            return got
        _, repo = got
        path = request.match_info["path"]
        if path not in repo.files:
            return _error(404, "EntryNotFound", f"{path} does not exist")
        data = repo.files[path]
        etag = hashlib.sha256(data).hexdigest() if path in repo.lfs else _git_oid(data)
        body = self.corrupt.get(path, data)
        headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if path in repo.lfs:
            headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))}
        start = 0
        rng = request.headers.get("Range", "")
        if rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
            start = int(rng[6:].split("-")[0])
        status = 206 if start else 200
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
        headers["Content-Length"] = str(len(body) - start)
        if request.method == "HEAD":
            return web.Response(status=status, headers=headers)
        cut = self.cut_once.pop(path, None)  # taken by the GET that starts now, not one already under way
        resp = web.StreamResponse(status=status, headers=headers)
        await resp.prepare(request)
        chunk = 16384
        pos = start
        while pos < len(body):
            assert self.hold is not None
            if self.gate_after is None or pos >= self.gate_after:
                await self.hold.wait()
            piece = body[pos : pos + chunk]
            if cut is not None and pos + len(piece) > cut:
                await resp.write(body[pos:cut])
                assert request.transport is not None
                request.transport.close()
                return resp
            await resp.write(piece)
            pos += len(piece)
            if self.rate:
                await asyncio.sleep(len(piece) / self.rate)
        await resp.write_eof()
        return resp

    def _app(self) -> web.Application:
        app = web.Application()
        base = "/api/models/{org}/{name}"
        app.router.add_get(base + "/revision/{rev}", self._info)
        app.router.add_get(base, self._info)
        app.router.add_get(base + "/tree/{rev}", self._tree)
        app.router.add_get("/{org}/{name}/resolve/{rev}/{path:.+}", self._resolve)  # HEAD too
        return app

    # --- lifecycle --------------------------------------------------------------------------------
    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def start() -> None:
            self.hold = asyncio.Event()
            self.hold.set()
            self._runner = web.AppRunner(self._app(), access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.host, 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()

        loop.run_until_complete(start())
        loop.run_forever()
        assert self._runner is not None
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def __enter__(self) -> FakeHub:
        self._thread = threading.Thread(target=self._run, name="fakehub", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the stand-in hub did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self.resume()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(
        {"error": message}, status=status, headers={"X-Error-Code": code, "X-Error-Message": message}
    )


def small_model(shards: int = 3, shard_bytes: int = 200_000) -> Repo:
    """A small safetensors model: ``shards`` LFS shards named in ``model.safetensors.index.json``, a config
    and a tokenizer (not LFS)."""
    import json

    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    files = {n: bytes([i]) * shard_bytes for i, n in enumerate(names, 1)}
    index = {
        "metadata": {"total_size": shards * shard_bytes},
        "weight_map": {f"model.layers.{i}.weight": n for i, n in enumerate(names)},
    }
    files |= {
        "model.safetensors.index.json": json.dumps(index, indent=2).encode(),
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "tokenizer.json": b'{"version": "1.0"}',
    }
    return Repo(files, lfs=set(names))
