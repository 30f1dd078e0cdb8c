"""The pooled client's connections in small pools (providers/shards.py): the same limits and
keep-alive as one pool of 64, requests spread so that no pool queues while the whole has room."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import certifi
import httpx
import pytest

from compactor.providers import http
from compactor.providers.base import ProviderError
from compactor.providers.shards import ShardedTransport
from fakes.loopback_http import LoopbackServer, request_path
from fakes.provider_server import FakeProviderServer


class CountingServer(LoopbackServer):
    """Counts the connections it accepted and holds every answer until ``hold`` requests are being
    answered at once (then answers them all)."""

    def __init__(self) -> None:
        self.connections = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.hold = 1
        self._released = asyncio.Event()

    @property
    def url(self) -> str:
        return self.base + "/answer"

    def expect_burst(self, size: int) -> None:
        self.hold = size
        self._released = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await super()._serve(reader, writer)

    async def answer(self, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight >= self.hold:
            self._released.set()
        await self._released.wait()
        self.in_flight -= 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        return True


class HeldServer(LoopbackServer):
    """A request to /<name> is answered once ``release(name)`` is called (``/now`` at once);
    ``/partial`` sends its headers and 3 of 100 bytes, then waits."""

    def __init__(self) -> None:
        self.events: dict[bytes, asyncio.Event] = {}
        self.arrived: list[bytes] = []

    async def __aexit__(self, *exc: object) -> None:
        for event in self.events.values():
            event.set()
        await super().__aexit__(*exc)

    def release(self, name: str) -> None:
        self.events.setdefault(b"/" + name.encode(), asyncio.Event()).set()

    async def arrivals(self, count: int) -> None:
        """Until ``count`` requests have arrived; fails after 5 s (a request stuck in the client)."""
        async def arrived() -> None:
            while len(self.arrived) < count:
                await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(arrived(), timeout=5)
        except TimeoutError:
            pytest.fail(f"{len(self.arrived)} of {count} requests reached the server")

    async def answer(self, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        path = request_path(request)
        self.arrived.append(path)
        if path == b"/partial":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabc")
            await writer.drain()
            await reader.read()
            return False
        if path != b"/now":
            await self.events.setdefault(path, asyncio.Event()).wait()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        return True


@pytest.fixture
def tls_contexts(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The keyword arguments of every ``ssl.create_default_context`` call from here on."""
    made: list[dict[str, object]] = []
    create = ssl.create_default_context

    def recorded(*args: object, **kwargs: object) -> ssl.SSLContext:
        made.append(kwargs)
        return create(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl, "create_default_context", recorded)
    return made


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    async with CountingServer() as counting:
        yield counting


async def _burst(client: httpx.AsyncClient, url: str, size: int) -> list[int]:
    async def one() -> int:
        response = await client.post(url, content=b"{}")
        return response.status_code

    return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(size))), timeout=20)


async def test_a_burst_is_answered_at_once_and_the_next_burst_reuses_its_connections(
        server: CountingServer) -> None:
    # 16 pools of 2: each pool alone could hold only 2 of the 32 at once, so the server releases the
    # burst only if the requests were spread over every pool.
    transport = ShardedTransport(16, httpx.Limits(max_connections=32, max_keepalive_connections=32))
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(2):
            server.expect_burst(32)
            assert await _burst(client, server.url, 32) == [200] * 32
            assert server.most_in_flight == 32 and transport.open_requests == (0,) * 16
        assert server.connections == 32


async def test_one_caller_at_a_time_keeps_one_connection(server: CountingServer) -> None:
    transport = ShardedTransport(16, httpx.Limits(max_connections=64, max_keepalive_connections=64))
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(5):
            assert (await client.post(server.url, content=b"{}")).status_code == 200
    assert server.connections == 1


async def test_the_limits_hold_for_the_whole(server: CountingServer) -> None:
    transport = ShardedTransport(4, httpx.Limits(max_connections=8, max_keepalive_connections=8))
    async with httpx.AsyncClient(transport=transport) as client:
        server.expect_burst(8)
        waiting = asyncio.gather(*(client.post(server.url, content=b"{}") for _ in range(12)))
        answers = await asyncio.wait_for(waiting, timeout=20)
        assert [answer.status_code for answer in answers] == [200] * 12
    assert server.connections == 8  # the other 4 waited for one of the 8


async def test_a_failed_request_and_an_unread_close_give_their_place_back() -> None:
    transport = ShardedTransport(2, httpx.Limits(max_connections=2, max_keepalive_connections=2))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError):
            await client.post("http://127.0.0.1:9/", content=b"{}")  # the discard port: refused
        assert transport.open_requests == (0, 0)
        async with CountingServer() as counting:
            response = await transport.handle_async_request(httpx.Request("POST", counting.url, content=b"{}"))
            assert transport.open_requests == (1, 0)
            await response.stream.aclose()
            await response.stream.aclose()
            assert transport.open_requests == (0, 0)


def test_the_shards_share_one_tls_context(tls_contexts: list[dict[str, object]]) -> None:
    ShardedTransport(16, httpx.Limits(max_connections=64, max_keepalive_connections=64))
    assert len(tls_contexts) == 1


@pytest.mark.parametrize(("shards", "connections", "kept"), [(0, 4, 4), (3, 4, 4), (4, 4, 2), (4, None, 4)])
def test_limits_that_do_not_share_evenly_are_refused(shards: int, connections: int | None, kept: int) -> None:
    with pytest.raises(ValueError):
        ShardedTransport(shards, httpx.Limits(max_connections=connections, max_keepalive_connections=kept))


async def test_the_pooled_client_answers_a_burst_at_once_without_a_proxy(no_proxy_variables: None,
                                                                       server: CountingServer) -> None:
    await http.aclose_client()
    server.expect_burst(http.POOL_SHARDS * 2)
    calls = [http.post_json(server.url, {}, headers={}, timeout_s=20, max_body_bytes=100)
             for _ in range(http.POOL_SHARDS * 2)]
    assert [reply.status for reply in await asyncio.gather(*calls)] == [200] * (http.POOL_SHARDS * 2)
    assert server.connections == http.POOL_SHARDS * 2
    await http.aclose_client()


async def test_an_operators_proxy_is_still_used(monkeypatch: pytest.MonkeyPatch,
                                                fake_provider: FakeProviderServer) -> None:
    monkeypatch.delenv("http_proxy", raising=False)  # read before HTTP_PROXY
    monkeypatch.setenv("HTTP_PROXY", fake_provider.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    await http.aclose_client()
    reply = await http.post_json("http://upstream.invalid/v1/decisions", {"n": 1}, headers={}, timeout_s=10,
                                 max_body_bytes=1 << 20)
    assert reply.status == 200
    assert [request.path for request in fake_provider.requests] == ["http://upstream.invalid/v1/decisions"]
    await http.aclose_client()


async def test_with_every_connection_taken_a_request_gets_the_first_one_freed_in_any_pool() -> None:
    transport = ShardedTransport(4, httpx.Limits(max_connections=4, max_keepalive_connections=4))
    async with HeldServer() as server, httpx.AsyncClient(transport=transport) as client:
        slow = asyncio.create_task(client.post(server.base + "/slow"))  # the first pool's only connection
        quick = [asyncio.create_task(client.post(server.base + "/quick")) for _ in range(3)]
        await server.arrivals(4)
        late = asyncio.create_task(client.post(server.base + "/now"))
        await asyncio.sleep(0.05)
        server.release("quick")
        assert (await asyncio.wait_for(late, timeout=5)).status_code == 200  # while /slow still holds its own
        assert not slow.done()
        server.release("slow")
        await asyncio.gather(slow, *quick)
        assert transport.open_requests == (0, 0, 0, 0)


async def test_a_request_waiting_for_a_connection_times_out_or_is_cancelled_without_losing_a_place() -> None:
    transport = ShardedTransport(2, httpx.Limits(max_connections=2, max_keepalive_connections=2))
    async with HeldServer() as server, httpx.AsyncClient(transport=transport) as client:
        held = [asyncio.create_task(client.post(server.base + "/held")) for _ in range(2)]
        await server.arrivals(2)
        with pytest.raises(httpx.PoolTimeout):
            await client.post(server.base + "/now", timeout=httpx.Timeout(5, pool=0.1))
        waiting = asyncio.create_task(client.post(server.base + "/now"))
        await asyncio.sleep(0.05)
        waiting.cancel()
        server.release("held")
        await asyncio.gather(*held)
        assert transport.open_requests == (0, 0)
        answers = await asyncio.wait_for(asyncio.gather(*(client.post(server.base + "/now") for _ in range(3))), 5)
        assert [answer.status_code for answer in answers] == [200] * 3


async def test_a_timed_out_or_cancelled_call_gives_its_place_back(no_proxy_variables: None) -> None:
    await http.aclose_client()
    transport = http.client()._transport  # the pooled client's own (httpx keeps it there)
    assert isinstance(transport, ShardedTransport)
    async with HeldServer() as server:
        for path in ("/never", "/partial"):  # no headers yet; a body cut short
            with pytest.raises(ProviderError, match="no answer within"):
                await http.post_json(server.base + path, {}, headers={}, timeout_s=0.2, max_body_bytes=1000)
            assert transport.open_requests == (0,) * http.POOL_SHARDS
        call = asyncio.create_task(http.post_json(server.base + "/never", {}, headers={}, timeout_s=10,
                                                  max_body_bytes=1000))
        await asyncio.sleep(0.1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert transport.open_requests == (0,) * http.POOL_SHARDS
    await http.aclose_client()


def test_every_shard_verifies_tls_as_httpx_does(monkeypatch: pytest.MonkeyPatch,
                                                tls_contexts: list[dict[str, object]]) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    transport = ShardedTransport(4, httpx.Limits(max_connections=4, max_keepalive_connections=4))
    assert tls_contexts == [{"cafile": certifi.where()}]  # the operator's SSL_CERT_FILE, as httpx's own transport
    for shard in transport._shards:
        context = shard._pool._ssl_context
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
