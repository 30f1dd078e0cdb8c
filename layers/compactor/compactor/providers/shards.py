"""A connection pool split into small pools: ``ShardedTransport`` spreads requests over several
``httpx.AsyncHTTPTransport`` instances, each request to the one with the fewest requests open.

Why: httpcore's pool walks all of its connections on every request it starts and every response it
closes, checks each idle one's socket, and for each idle one counts the whole pool again. With 64
keep-alive connections a request of 32 batches (64 model calls) spent about a quarter of its CPU there
(docs/performance.md, "End-to-end concurrency"). The same 64 connections in 16 pools of 4 cost 16 times
fewer checks per pool operation and 256 times fewer counts, and keep the same limits: at most
``shards × per-shard`` connections open and kept alive.

Balance: a request goes to the shard with the fewest open requests (the first such), counted from
the request's start to its response's close. So the shards never queue while the whole has a free
connection, a lone caller always reuses the first shard's connection, and a burst reuses the
connections the previous burst left in each shard. With every connection taken, requests wait in one
queue for the first connection freed in any shard, as they would in one pool, within their pool timeout.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable

import httpx


class ShardedTransport(httpx.AsyncBaseTransport):
    """The connections of ``limits`` in ``shards`` equal HTTP transports (one TLS context for all: ``tls``, else
    httpx's default settings); requests go to the least busy one."""

    def __init__(self, shards: int, limits: httpx.Limits, tls: ssl.SSLContext | None = None) -> None:
        counts = (limits.max_connections, limits.max_keepalive_connections)
        if shards < 1 or any(count is None or count < shards or count % shards for count in counts):
            raise ValueError(f"{shards} shards cannot share {counts} connections evenly")
        each = httpx.Limits(max_connections=limits.max_connections // shards,
                            max_keepalive_connections=limits.max_keepalive_connections // shards,
                            keepalive_expiry=limits.keepalive_expiry)
        if tls is None:
            tls = httpx.create_ssl_context()
        self._shards = [httpx.AsyncHTTPTransport(verify=tls, limits=each) for _ in range(shards)]
        self._open = [0] * shards
        # One place per connection of the whole, held from a request's start to its response's close:
        # while one is free, the least busy shard has a free connection.
        self._places = asyncio.Semaphore(limits.max_connections)

    @property
    def open_requests(self) -> tuple[int, ...]:
        """Requests started and not yet closed, per shard."""
        return tuple(self._open)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        places = self._places
        if places.locked():  # every connection taken: wait in line, as httpcore's own pool would
            try:
                async with asyncio.timeout(request.extensions.get("timeout", {}).get("pool")):
                    await places.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("no connection became free within the pool timeout", request=request) from None
        else:
            await places.acquire()  # free: taken without suspending
        open_counts = self._open
        index = open_counts.index(min(open_counts))
        open_counts[index] += 1
        try:
            response = await self._shards[index].handle_async_request(request)
        except BaseException:
            self._closed(index)
            raise
        # The shard's own response, its body wrapped: a new response would copy its headers again.
        response.stream = _ClosedOnce(response.stream, lambda: self._closed(index))
        return response

    def _closed(self, index: int) -> None:
        self._open[index] -= 1
        self._places.release()

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


class _ClosedOnce(httpx.AsyncByteStream):
    """A response body that reports its first close (its connection is back in its pool then)."""

    def __init__(self, stream: httpx.AsyncByteStream, on_close: Callable[[], None]) -> None:
        self._stream = stream
        self._on_close: Callable[[], None] | None = on_close

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # the wrapped stream's own iterator: nothing added per chunk

    async def aclose(self) -> None:
        on_close, self._on_close = self._on_close, None
        try:
            await self._stream.aclose()
        finally:
            if on_close is not None:
                on_close()
