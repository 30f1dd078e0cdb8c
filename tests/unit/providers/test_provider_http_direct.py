"""post_json's direct path (docs/performance.md, "The provider calls' own CPU"): without a proxy a call goes
straight to the pooled client's transport with the request the client would have built. The same bytes
reach the provider as through ``httpx.AsyncClient.stream``; a tracer's wrapper of the client's transport
still sees every call; the parsed URLs and the response's close keep nothing wrong."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from compactor.providers import http
from compactor.providers.base import ProviderError
from compactor.providers.shards import ShardedTransport
from fakes.loopback_http import LoopbackServer, request_path


class RawServer(LoopbackServer):
    """Keeps each request's bytes (head and body) and answers ``answer`` (a whole HTTP response) to each."""

    def __init__(self, answer: bytes = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok") -> None:
        self.response = answer
        self.requests: list[bytes] = []

    async def answer(self, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        self.requests.append(request)
        writer.write(self.response)
        await writer.drain()
        return True

    @property
    def paths(self) -> list[bytes]:
        return [request_path(request) for request in self.requests]


@pytest.fixture
async def raw_server(no_proxy_variables: None) -> AsyncIterator[RawServer]:
    await http.aclose_client()
    async with RawServer() as server:
        yield server
    await http.aclose_client()


HEADER_SETS: list[dict[str, str]] = [
    {},
    {"Authorization": "Bearer sk-test-0123456789"},
    {"anthropic-version": "2023-06-01", "x-api-key": "k-1"},
    {"user-agent": "someone-else", "ACCEPT-ENCODING": "identity", "accept": "text/plain"},  # the client's, renamed
    {"Connection": "close", "Content-Type": "application/json; charset=utf-8"},
]
PAYLOADS: list[Any] = [{}, {"n": 1, "text": "naïve café … ✓ \u2028", "nested": [1.5, None, True, {"a": "b"}]}]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("headers", HEADER_SETS)
async def test_the_direct_path_sends_the_bytes_the_client_sends(raw_server: RawServer, headers: dict[str, str],
                                                                payload: Any) -> None:
    url = raw_server.base + "/v1/chat/completions?x=1"
    reply = await http.post_json(url, payload, headers=headers, timeout_s=10, max_body_bytes=100)
    assert (reply.status, reply.body) == (200, b"ok")
    pooled = http.client()
    assert pooled in http._direct  # this call took the direct path
    content = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    # What the client itself sends for the same call (post_json's path behind a proxy).
    async with pooled.stream("POST", url, content=content, timeout=httpx.Timeout(10),
                             headers={"Content-Type": "application/json", "Accept": "application/json",
                                      **headers}) as response:
        await response.aread()
    direct, through_client = raw_server.requests
    assert direct == through_client


async def test_a_tracers_wrapper_of_the_clients_transport_sees_every_call(
        raw_server: RawServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client class patched as the X-Ray SDK's httpx patch does (its transport wrapped in one that traces
    and adds a header): the direct path goes through the wrapper, not around it."""
    seen: list[str] = []

    class Traced(httpx.AsyncBaseTransport):
        def __init__(self, wrapped: httpx.AsyncBaseTransport) -> None:
            self.wrapped = wrapped

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(str(request.url))
            request.headers["X-Amzn-Trace-Id"] = "Root=1-test"
            return await self.wrapped.handle_async_request(request)

    class InstrumentedClient(httpx.AsyncClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._transport = Traced(self._transport)

    monkeypatch.setattr(httpx, "AsyncClient", InstrumentedClient)
    await http.aclose_client()
    url = raw_server.base + "/decisions"
    assert (await http.post_json(url, {}, headers={}, timeout_s=10, max_body_bytes=100)).status == 200
    assert seen == [url]
    assert b"\r\nX-Amzn-Trace-Id: Root=1-test\r\n" in raw_server.requests[0]
    assert isinstance(http.client()._transport, Traced) and isinstance(http.client()._transport.wrapped,
                                                                       ShardedTransport)


async def test_parsed_urls_are_kept_per_url_and_bounded(raw_server: RawServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "_urls", {})
    monkeypatch.setattr(http, "_URLS_MAX", 3)
    paths = ["/a", "/b", "/a", "/c?q=1", "/d", "/a", "/e/f"]
    for path in paths:
        await http.post_json(raw_server.base + path, {}, headers={}, timeout_s=10, max_body_bytes=100)
    assert raw_server.paths == [path.encode() for path in paths]
    assert 0 < len(http._urls) <= 3
    assert all(str(parsed) == url for url, parsed in http._urls.items())


@pytest.mark.parametrize("url", ["http://[::1", "ftp://example.invalid/x", "/v1/decisions", "http:///nohost",
                                 "127.0.0.1:9/v1", "no url"])
async def test_an_unusable_url_fails_as_through_the_client_and_is_not_kept(no_proxy_variables: None, url: str) -> None:
    await http.aclose_client()
    with pytest.raises(ProviderError) as direct:
        await http.post_json(url, {}, headers={}, timeout_s=5, max_body_bytes=100)
    assert http.client() in http._direct
    with pytest.raises((httpx.RequestError, httpx.InvalidURL)) as through_client:
        async with http.client().stream("POST", url, content=b"{}", timeout=httpx.Timeout(5)) as response:
            await response.aread()
    assert direct.value.kind == "network_error"
    assert direct.value.message == http._describe(through_client.value, ())
    assert url not in http._urls or not http._urls[url].is_relative_url  # kept only as the client reads it
    await http.aclose_client()


async def test_a_body_over_the_bound_closes_the_response_and_gives_its_place_back(no_proxy_variables: None) -> None:
    await http.aclose_client()
    transport = http.client()._transport
    assert isinstance(transport, ShardedTransport)
    streamed = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"100\r\n" + b"x" * 256 + b"\r\n0\r\n\r\n"
    for answer in (b"HTTP/1.1 200 OK\r\ncontent-length: 256\r\n\r\n" + b"x" * 256, streamed):
        async with RawServer(answer) as server:
            with pytest.raises(ProviderError, match="exceeds 100 bytes") as caught:
                await http.post_json(server.base + "/big", {}, headers={}, timeout_s=10, max_body_bytes=100)
            assert caught.value.kind == "bad_response" and caught.value.http_status == 200
            assert transport.open_requests == (0,) * http.POOL_SHARDS
            reply = await http.post_json(server.base + "/big", {}, headers={}, timeout_s=10, max_body_bytes=1000)
            assert reply.body == b"x" * 256
            assert transport.open_requests == (0,) * http.POOL_SHARDS
    await http.aclose_client()


async def test_an_error_over_the_bound_is_still_its_statuss_error(no_proxy_variables: None) -> None:
    # An error status's body is read for its message: a 429 (or a gateway's 503 page) longer than the bound was a
    # bad_response, without its kind or Retry-After; only its start is read now, and the connection is closed.
    await http.aclose_client()
    transport = http.client()._transport
    page = b'{"error": {"message": "Rate limit reached"}}' + b" " * 256
    head = b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\n"
    streamed = head + b"transfer-encoding: chunked\r\n\r\n" + b"12c\r\n" + page + b"\r\n0\r\n\r\n"
    for answer in (head + b"content-length: 300\r\n\r\n" + page, streamed):
        async with RawServer(answer) as server:
            reply = await http.post_json(server.base + "/big", {}, headers={}, timeout_s=10, max_body_bytes=100)
            assert (reply.status, reply.body, reply.retry_after_s) == (429, page[:100], 3.0)
            error = http.reply_error(reply)
            assert error is not None and (error.kind, error.http_status, error.retry_after_s) == ("rate_limit", 429, 3.0)
            assert transport.open_requests == (0,) * http.POOL_SHARDS
    await http.aclose_client()


async def test_behind_a_proxy_the_client_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    await http.aclose_client()
    assert http.client() not in http._direct
    await http.aclose_client()


@pytest.mark.parametrize("headers", HEADER_SETS)
async def test_the_direct_request_is_the_one_the_client_builds(no_proxy_variables: None, headers: dict[str, str]) -> None:
    await http.aclose_client()
    pooled = http.client()
    url, content = "https://api.example.invalid:8443/v1/messages?beta=1", b'{"a":1}'
    request_headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
    direct = http.direct_request(url, content, request_headers, http._direct[pooled][1], 7.5)
    built = pooled.build_request("POST", url, content=content, headers=request_headers, timeout=httpx.Timeout(7.5))
    assert direct is not None
    assert (direct.method, direct.url, direct.headers.raw, direct.content, direct.extensions) == \
        (built.method, built.url, built.headers.raw, built.content, built.extensions)
    await http.aclose_client()


async def test_the_kept_head_of_a_call_gives_the_request_the_client_builds(no_proxy_variables: None,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each direct request's head is kept by URL and headers (docs/performance.md, "The transports' per-call
    work"): the next call of the same URL and headers, with another body, is still exactly the request the
    client builds, and callers of the same URL with other keys or other headers each get their own."""
    monkeypatch.setattr(http, "_heads", {})
    await http.aclose_client()
    pooled = http.client()
    client_headers = http._direct[pooled][1]
    urls = ["https://api.example.invalid:8443/v1/messages?beta=1", "http://127.0.0.1:9/v1/decisions"]
    header_sets = [{"Content-Type": "application/json", "Accept": "application/json", **headers}
                   for headers in HEADER_SETS + [{"Authorization": "Bearer sk-other-9876543210"}]]
    header_sets.append(dict(reversed(header_sets[3].items())))  # the same headers in another order
    bodies = [b'{"a":1}', b"", b'{"text":"' + b"x" * 70_000 + b'"}', "naïve ✓".encode()]
    for round_ in range(2):
        for body in bodies:
            for url in urls:
                for headers in header_sets:
                    direct = http.direct_request(url, body, headers, client_headers, 7.5 + round_)
                    built = pooled.build_request("POST", url, content=body, headers=headers,
                                                 timeout=httpx.Timeout(7.5 + round_))
                    assert direct is not None
                    assert (direct.method, direct.url, direct.headers.raw, direct.content, direct.extensions) == \
                        (built.method, built.url, built.headers.raw, built.content, built.extensions)
                    direct.headers["X-Amzn-Trace-Id"] = "Root=1-changed"  # a tracer's header stays its request's
    assert len(http._heads) == len(urls) * len(header_sets)
    await http.aclose_client()


@pytest.mark.parametrize("headers", [{"Content-Length": "3"}, {"transfer-encoding": "chunked"}])
async def test_a_call_naming_its_bodys_length_is_built_by_httpx_every_time(no_proxy_variables: None,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            headers: dict[str, str]) -> None:
    monkeypatch.setattr(http, "_heads", {})
    await http.aclose_client()
    pooled = http.client()
    for body in (b"abc", b"abcdef"):
        direct = http.direct_request("http://127.0.0.1:9/x", body, headers, http._direct[pooled][1], 5)
        built = pooled.build_request("POST", "http://127.0.0.1:9/x", content=body, headers=headers,
                                     timeout=httpx.Timeout(5))
        assert direct is not None and direct.headers.raw == built.headers.raw
    assert http._heads == {}
    await http.aclose_client()


async def test_kept_heads_are_bounded(no_proxy_variables: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "_heads", {})
    monkeypatch.setattr(http, "_HEADS_MAX", 3)
    await http.aclose_client()
    client_headers = http._direct[http.client()][1]
    for index in range(10):
        http.direct_request("http://127.0.0.1:9/x", b"{}", {"Authorization": f"Bearer k-{index}"}, client_headers, 5)
        assert 0 < len(http._heads) <= 3
    await http.aclose_client()


async def test_a_client_closed_after_a_call_took_it_sends_nothing(raw_server: RawServer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that took the pooled client just before an orderly close (``aclose_client``) fails as the
    client's own path does, instead of opening a connection on the closed client's pools that nothing closes."""
    closing = http.client()
    await http.aclose_client()
    monkeypatch.setattr(http, "client", lambda: closing)
    with pytest.raises(RuntimeError, match="client has been closed"):
        await http.post_json(raw_server.base + "/late", {}, headers={}, timeout_s=10, max_body_bytes=100)
    assert raw_server.requests == []
    assert closing._transport.open_requests == (0,) * http.POOL_SHARDS


def _answer(text: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text)


class DoubleAnswerServer(LoopbackServer):
    """Answers each request with its own path; to the first request of the first connection it sends a second,
    unsolicited response in the same write (a provider or proxy out of step). Counts its connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.answered = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await super()._serve(reader, writer)

    async def answer(self, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        self.answered += 1
        out = _answer(request_path(request))
        if self.answered == 1:
            out += _answer(b"/unsolicited")
        writer.write(out)
        await writer.drain()
        return True


@pytest.mark.parametrize("path", ["direct", "client"])
async def test_a_connection_holding_bytes_past_its_answer_is_not_reused(no_proxy_variables: None,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        path: str) -> None:
    """docs/providers.md "Respecting the provider": each call gets its own answer, never the extra response a
    server sent to an earlier call; the connection that held it is closed and a well-behaved one is reused."""
    await http.aclose_client()
    pooled = http.client()
    if path == "client":  # the client's own path, as behind a proxy
        monkeypatch.delitem(http._direct, pooled)
    async with DoubleAnswerServer() as server:
        bodies = [(await http.post_json(server.base + f"/call{i}", {}, headers={}, timeout_s=10,
                                        max_body_bytes=100)).body for i in range(4)]
        assert bodies == [b"/call0", b"/call1", b"/call2", b"/call3"]
        assert server.connections == 2  # the first closed for its leftover; the second kept for the rest
        assert pooled._transport.open_requests == (0,) * http.POOL_SHARDS
    await http.aclose_client()
