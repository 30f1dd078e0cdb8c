"""A bare HTTP/1.1 keep-alive server on 127.0.0.1 for the pooled client's tests: what a request's bytes were
and when its answer goes are the test's (the fake provider answers whole JSON calls instead)."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """The next request of a keep-alive connection, whole: its head and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head + await reader.readexactly(length)


def request_path(request: bytes) -> bytes:
    return request.split(b" ")[1]


class LoopbackServer:
    """HTTP/1.1 keep-alive on 127.0.0.1 (``base``): each request of a connection (its whole bytes) is answered by
    :meth:`answer`, in turn, until it returns False; every connection is closed on exit."""

    async def __aenter__(self) -> LoopbackServer:
        self._writers: set[asyncio.StreamWriter] = set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base = "http://127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()

    async def answer(self, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        raise NotImplementedError

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while await self.answer(await read_request(reader), reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
