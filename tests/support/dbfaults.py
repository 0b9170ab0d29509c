"""Databases that are out of reach, made of real sockets on 127.0.0.1.

* :func:`closed_port`: a port nothing listens on (connecting is refused at once).
* :class:`SilentListener`: a socket that accepts connections (the kernel completes the TCP
  handshake) and never says a word, like a database host that hangs.
* :class:`TcpProxy`: forwards a port to a real server (PostgreSQL); :meth:`TcpProxy.cut` stops
  listening and drops every open connection, so the database "dies" under a running bot;
  :meth:`TcpProxy.freeze` keeps every connection open and forwards nothing any more, like a
  database host that hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket


def closed_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and has no listener."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SilentListener:
    """``with SilentListener() as port:`` — connections are accepted by the kernel, never answered."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


class TcpProxy:
    """An asyncio TCP forwarder ``127.0.0.1:port`` -> ``target``; ``await proxy.cut()`` kills it."""

    def __init__(self, target_host: str, target_port: int, *, port: int = 0):
        self.target = (target_host, target_port)
        self.server: asyncio.base_events.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.port = port
        self.frozen = False

    async def start(self) -> TcpProxy:
        """Listen on ``port`` (given: a database that appears where one was expected; else a free one)."""
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port, reuse_address=True)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                if self.frozen:
                    continue  # swallowed: the other side waits for an answer that never comes
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.frozen:  # accepted, never answered
            self.writers.add(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def freeze(self) -> None:
        """From now on nothing is forwarded either way; connections stay open."""
        self.frozen = True

    async def cut(self) -> None:
        """Stop listening (new connections are refused) and reset every open connection."""
        if self.server is not None:
            self.server.close()
        for w in list(self.writers):
            sock = w.get_extra_info("socket")
            with contextlib.suppress(Exception):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            w.close()
        self.writers.clear()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)
