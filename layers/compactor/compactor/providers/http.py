"""Pooled HTTP for model transports: one ``httpx.AsyncClient`` per event loop, bounded JSON POSTs.

A Lambda container keeps one event loop for its whole life, so its client (and its keep-alive
connections) are reused across invocations. Tests and CLI runs create new loops; clients are keyed by
the running loop and entries of closed loops are dropped. Nothing here retries: the router decides.
Error messages never carry credentials (:func:`scrub`). The clients keep no cookies: one client serves
every caller of the container, so a cookie a provider sets in its answer to one caller's call would go
with the next caller's calls (docs/performance.md, end-to-end concurrency).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import os
import re
import ssl
import threading
import weakref
from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.request import getproxies

import h11
import httpx

from compactor import ca_directory
from compactor.jsonutil import dense_body, loads_within, utf8_safe
from compactor.providers.base import (
    AUTH_ERROR, BAD_REQUEST, BAD_RESPONSE, CONTEXT_OVERFLOW, NETWORK_ERROR, RATE_LIMIT, TIMEOUT,
    UPSTREAM_ERROR, Offer, ProviderError,
)
from compactor.records import record
from compactor.providers.keys import resolve_key
from compactor.providers.shards import ShardedTransport

# Keep-alive for as many connections as one request opens at once: a 32-batch burst reuses its
# connections on the next burst instead of reconnecting (docs/performance.md). Held in 16 pools of 4,
# since each pool's bookkeeping grows with the square of its connections (providers/shards.py).
POOL_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=30.0)
POOL_SHARDS = 16
ERROR_MESSAGE_MAX_CHARS = 300
# The most characters of a provider's error text that are looked into (its kind's words, credentials to scrub): an
# error body may be as large as an answer (megabytes of a proxy's page), and every regex pass over 8 MiB held the
# event loop for most of a second. Providers' error messages are a few hundred characters.
ERROR_TEXT_MAX_CHARS = 8192
# Failures before the request left: no connection was made, the proxy refused the tunnel or the connection to the
# provider (httpx's ProxyError, raised before the request is written), or the URL could not be used (nothing billed).
_NOTHING_SENT = (httpx.ConnectError, httpx.ProxyError, httpx.UnsupportedProtocol, httpx.InvalidURL)
RETRY_AFTER_MAX_S = 600.0  # a longer Retry-After is read as this (the deadline decides anyway)
_USER_AGENT = "compactor"

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()
_clients_lock = threading.Lock()
# The transport each client without a proxy sends through (the sharded pools, or what a tracer wrapped them
# in), and the headers the client adds to each request: post_json's direct path (docs/performance.md).
_direct: weakref.WeakKeyDictionary[httpx.AsyncClient, tuple[httpx.AsyncBaseTransport, list[tuple[str, bytes, bytes]]]] \
    = weakref.WeakKeyDictionary()
# Parsed endpoint URLs (a few per catalog), so that a call does not parse its URL string again.
_urls: dict[str, httpx.URL] = {}
_URLS_MAX = 256
# The head of each direct request without its Content-Length, by URL, the call's headers and the client's
# (a few per catalog and key): the headers httpx builds for that call, kept from the first one so that the next
# does not build them again (docs/performance.md, "The transports' per-call work").
_heads: dict[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, bytes, bytes], ...]],
             list[tuple[bytes, bytes]]] = {}
_HEADS_MAX = 256

# Credential-looking substrings providers sometimes echo back in error bodies.
_SECRET_PATTERNS = (
    re.compile(r"(?i)bearer\s+[^\s\"',]+"),
    re.compile(r"\b(?:sk|pk|rk|key)-[A-Za-z0-9_\-*.]{6,}"),
)
# A refusal for the request's size (docs/providers.md "Errors"): OpenAI's "maximum context length", Anthropic's
# "prompt is too long", Bedrock's "Input is too long for requested model." (Claude) and "tokens exceeds" (Nova).
CONTEXT_OVERFLOW_WORDS = re.compile(
    r"context|too many tokens|token limit|tokens? exceeds?|exceeds? .{0,40}tokens|(?:prompt|input) is too long",
    re.IGNORECASE,
)


@record(frozen=True)
class HttpReply:
    """A complete HTTP answer (body fully read and within the size bound)."""

    status: int
    body: bytes
    retry_after_s: float | None = None  # the Retry-After header, in seconds (see parse_retry_after)
    location: str | None = None  # a redirect's Location header (redirects are not followed)


def client() -> httpx.AsyncClient:
    """The pooled client of the running event loop (created on first use)."""
    loop = asyncio.get_running_loop()
    with _clients_lock:
        for stale in [known for known in _clients if known.is_closed()]:
            del _clients[stale]
        pooled = _clients.get(loop)
        if pooled is None or pooled.is_closed:
            pooled = _new_client()
            _clients[loop] = pooled
    return pooled


def _new_client() -> httpx.AsyncClient:
    # httpx honours HTTP_PROXY / HTTPS_PROXY / ALL_PROXY (and NO_PROXY) only with its own transport:
    # behind a proxy, the calls keep it (and one pool); the sharded pools are for direct connections.
    proxies = getproxies()
    proxied = any(proxies.get(scheme) for scheme in ("http", "https", "all"))
    tls = tls_context()
    pooled = httpx.AsyncClient(transport=None if proxied else ShardedTransport(POOL_SHARDS, POOL_LIMITS, tls),
                               verify=tls, limits=POOL_LIMITS, follow_redirects=False,
                               headers={"User-Agent": _USER_AGENT}, cookies=no_cookies())
    if not proxied:
        # The client's own transport: a tracer that instruments httpx's clients (the X-Ray SDK's patch)
        # wraps the one we gave in its own, and the direct path must go through that wrapper.
        _direct[pooled] = (pooled._transport, [(name.decode("ascii").lower(), name, value)
                                               for name, value in pooled.headers.raw])
    return pooled


def tls_context() -> ssl.SSLContext:
    """The TLS context of a new pooled client: httpx's default (``httpx.create_ssl_context()``: certifi's bundle,
    or the file or directory ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` names), with certifi's bundle read from the
    layer's hashed directory when it was built from that very file (:func:`compactor.ca_directory.hashed_directory`,
    checked once per container): the same certificates, read by OpenSSL when a chain needs them, instead of all of
    them parsed into the context (25-70 ms at a container's first provider call and again after each restore;
    docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11)."""
    if not (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR")):  # httpx would load those
        import certifi

        directory = ca_directory.hashed_directory(certifi.where())
        if directory is not None:
            return ssl.create_default_context(capath=directory)
    return httpx.create_ssl_context()


def no_cookies() -> CookieJar:
    """A cookie jar whose policy allows no domain: a ``Set-Cookie`` in an answer is not stored, so the jar
    stays empty and httpx adds no ``Cookie`` header to any call: nothing one caller's call receives goes
    with another caller's call."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


async def aclose_client() -> None:
    """Close the running loop's client, if any (tests and orderly shutdown)."""
    with _clients_lock:
        pooled = _clients.pop(asyncio.get_running_loop(), None)
    if pooled is not None:
        await pooled.aclose()


def drop_clients() -> None:
    """Forget every pooled client without awaiting their close (a SnapStart restore: connections opened
    before the snapshot are not to be reused). Their sockets are released with the objects. The kept request
    heads go too: they hold the keys the calls sent, which a restore reads again."""
    with _clients_lock:
        _clients.clear()
    _heads.clear()


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with known secret values and credential-looking tokens replaced by ``[redacted]``. A known secret
    is found with whitespace anywhere within it as well (an echo wrapped over lines, an HTML error page's ``<pre>``),
    and so is its start at the end of ``text`` (where :func:`bounded_text` may have cut it)."""
    for secret in secrets:
        if secret:
            text = _without_spaced(text.replace(secret, "[redacted]"), secret)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub("[redacted]", text)
    return text


_SPACE = re.compile(r"\s+")
# The fewest characters of a secret's start at the end of a text that are redacted: fewer may be any word's end.
_SECRET_START_MIN_CHARS = 8


def _without_spaced(text: str, secret: str) -> str:
    """``text`` with each occurrence of ``secret`` that whitespace splits replaced by ``[redacted]``: the secret is
    looked for with ``str.find`` in the text without its whitespace, and each match mapped back to its span, so the
    cost is linear in the text (no regex with a ``\\s*`` between characters, which backtracks)."""
    wanted = "".join(secret.split())
    joined = _SPACE.sub("", text)
    if not wanted or not joined:
        return text
    found = joined.find(wanted)
    start_len = next((size for size in range(min(len(wanted) - 1, len(joined)), _SECRET_START_MIN_CHARS - 1, -1)
                      if joined.endswith(wanted[:size])), 0)
    if found < 0 and not start_len:
        return text  # the common case: one pass to drop the whitespace, one search
    words = [match.span() for match in re.finditer(r"\S+", text)]
    offsets = list(itertools.accumulate((end - start for start, end in words), initial=0))  # each word's in joined

    def position(index: int) -> int:  # where the joined text's character ``index`` is in ``text``
        word = bisect.bisect_right(offsets, index) - 1
        return words[word][0] + index - offsets[word]

    spans = []
    while found >= 0:
        spans.append((position(found), position(found + len(wanted) - 1) + 1))
        found = joined.find(wanted, found + len(wanted))
    if start_len and (not spans or position(len(joined) - start_len) >= spans[-1][1]):
        spans.append((position(len(joined) - start_len), words[-1][1]))
    for start, end in reversed(spans):
        text = f"{text[:start]}[redacted]{text[end:]}"
    return text


def truncate(text: str, limit: int = ERROR_MESSAGE_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bounded_text(text: str, limit: int = ERROR_TEXT_MAX_CHARS) -> str:
    """The start of ``text``, at most ``limit`` characters, cut between words: a word the cut would split (a key, a
    token) is left out, so a scrub of the start redacts what a scrub of the whole would. A word with at least half
    of ``limit`` before the cut is kept, cut: a message shows its first few hundred characters only, thousands
    before the cut, and a key or token starting there is redacted by its pattern, its end cut or not."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    if not text[limit].isspace() and not head[-1].isspace():
        cut = len(head.rsplit(None, 1)[-1])  # the characters of the split word in ``head``
        if cut < limit // 2:
            head = head[:limit - cut]
    return head


def safe_message(text: str, secrets: Iterable[str | None] = ()) -> str:
    """A provider-derived message fit for traces: scrubbed, single-line, at most 300 characters, any lone
    surrogate (which no UTF-8 answer or record can carry) replaced by ``?``. Only the start of a long text is
    looked at (:func:`bounded_text`)."""
    return utf8_safe(truncate(" ".join(scrub(bounded_text(text), secrets).split())))


async def post_json(url: str, payload: Any, *, headers: dict[str, str], timeout_s: float,
                    max_body_bytes: int, secrets: Iterable[str | None] = ()) -> HttpReply:
    """POST ``payload`` as JSON and read the whole answer within ``timeout_s`` seconds in total.

    Raises :class:`ProviderError`: ``timeout``; ``network_error`` (connect/read/protocol failures,
    unusable URL); ``bad_response`` when the body exceeds ``max_body_bytes`` or cannot be decoded;
    ``bad_request`` when ``payload`` is not JSON. HTTP error statuses are
    returned, not raised (see :func:`error_for_status`).

    Without a proxy, the call goes straight to the client's transport with the request the client would
    have built (the same bytes on the wire): the client's per-call machinery (its URL and header merging,
    auth, redirect and cookie flows, its response wrapper) does nothing for these calls but costs about a
    quarter of their CPU (docs/performance.md, "The provider calls' own CPU"). Behind a proxy the client
    sends, since it picks the proxy per URL.
    """
    secrets = tuple(secrets)
    if timeout_s <= 0:
        raise ProviderError(TIMEOUT, "no time left for the call", sent=False)
    try:
        content = dense_body(payload)  # json.dumps's bytes (docs/performance.md, "The calls' bodies")
    except (TypeError, ValueError) as exc:
        raise ProviderError(BAD_REQUEST, f"request is not JSON-serialisable ({exc})", sent=False) from None
    request_headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
    pooled = client()
    # A client closed meanwhile (aclose_client) sends nothing: its own path raises, as it always did.
    direct = None if pooled.is_closed else _direct.get(pooled)
    # Causes are dropped (``from None``): httpx exceptions reference the request and its headers.
    try:
        async with asyncio.timeout(timeout_s):
            request = None if direct is None else direct_request(url, content, request_headers, direct[1], timeout_s)
            if request is None:
                async with pooled.stream("POST", url, content=content, headers=request_headers,
                                         timeout=httpx.Timeout(timeout_s)) as response:
                    return await _reply(response, max_body_bytes)
            response = await direct[0].handle_async_request(request)
            try:
                return await _reply(response, max_body_bytes)
            finally:
                await response.aclose()
    except TimeoutError:
        raise ProviderError(TIMEOUT, f"no answer within {timeout_s:.3g} s") from None
    except httpx.TimeoutException as exc:  # a connect timeout sent nothing; a later one may have been billed
        raise ProviderError(TIMEOUT, _describe(exc, secrets), sent=not isinstance(exc, httpx.ConnectTimeout)) from None
    except httpx.DecodingError as exc:
        raise ProviderError(BAD_RESPONSE, _describe(exc, secrets)) from None
    except (httpx.RequestError, httpx.InvalidURL) as exc:  # no connection made, no usable URL: nothing was sent
        raise ProviderError(NETWORK_ERROR, _describe(exc, secrets),
                            sent=not isinstance(exc, _NOTHING_SENT)) from None


def direct_request(url: str, content: bytes, headers: dict[str, str],
                   client_headers: list[tuple[str, bytes, bytes]], timeout_s: float) -> httpx.Request | None:
    """The request ``httpx.AsyncClient.stream("POST", url, content=..., headers=..., timeout=timeout_s)`` builds
    on a client whose headers are ``client_headers`` (lower-cased name, name, value; no base URL, parameters or
    cookies): the client's headers but those ``headers`` name (in any case), then ``headers``; the timeout
    for each phase. ``None`` for a URL without a scheme or a host, which the client reads its own way (it
    fails either way)."""
    parsed = _urls.get(url)
    if parsed is None:
        parsed = httpx.URL(url)  # an unusable URL raises here, as in the client, and is not kept
        if parsed.is_relative_url:
            return None
        if len(_urls) >= _URLS_MAX:
            _urls.clear()
        _urls[url] = parsed
    extensions = {"timeout": {"connect": timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}}
    key = (url, tuple(headers.items()), tuple(client_headers))
    head = _heads.get(key) if content else None  # (an empty body's Content-Length comes right after Host)
    if head is not None:  # httpx's headers for this call: the kept head, then the body's Content-Length
        request = httpx.Request("POST", parsed, headers=[*head, (b"Content-Length", b"%d" % len(content))],
                                stream=httpx.ByteStream(content), extensions=extensions)
        request.read()
        return request
    named = {name.lower() for name in headers}
    merged: list[tuple[str | bytes, str | bytes]] = [(name, value) for lower, name, value in client_headers
                                                     if lower not in named]
    merged.extend(headers.items())
    request = httpx.Request("POST", parsed, content=content, headers=merged, extensions=extensions)
    raw = request.headers.raw
    # httpx puts the body's Content-Length last, after the call's headers and its Host before them; a call
    # naming its own Content-Length or Transfer-Encoding is built by httpx every time.
    if content and raw[-1] == (b"Content-Length", b"%d" % len(content)) and not named & _BODY_HEADERS \
            and not any(lower in _BODY_HEADERS for lower, _, _ in client_headers):
        if len(_heads) >= _HEADS_MAX:
            _heads.clear()
        _heads[key] = raw[:-1]
    return request


_BODY_HEADERS = frozenset({"content-length", "transfer-encoding"})


async def _reply(response: httpx.Response, max_body_bytes: int) -> HttpReply:
    response.stream = _LeftoverRefused(response.stream)
    body = await _read_bounded(response, max_body_bytes)
    status = response.status_code
    return HttpReply(status, body, retry_after_of(response.headers, rate_limited=status == 429),
                     response.headers.get("Location") if 300 <= status < 400 else None)


class _LeftoverRefused(httpx.AsyncByteStream):
    """A response body whose close first refuses its connection when that connection holds bytes past the
    response (:func:`refuse_leftover`): httpx closes a response as soon as its body is read, and httpcore gives
    the connection back to its pool in that close, so the check runs just before it. Iterating is the wrapped
    stream's own iterator: nothing is added per chunk."""

    __slots__ = ("_stream",)

    def __init__(self, stream: httpx.AsyncByteStream) -> None:
        self._stream = stream

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        refuse_leftover(self._stream)
        await self._stream.aclose()


# The links from an httpx response's stream to the httpcore HTTP/1.1 connection that reads it: our shards'
# wrapper and httpx's client wrap ``_stream``, httpx's transport ``_httpcore_stream``, httpcore's pool ``_stream``,
# and the connection's body stream holds ``_connection``.
_STREAM_LINKS = ("_stream", "_httpcore_stream", "_connection")
_STREAM_LINKS_MAX = 8


def refuse_leftover(stream: Any) -> bool:
    """Whether the connection that read the response body ``stream`` holds bytes past that response; if so, its
    state is set to error, so that the response's close closes the connection instead of giving it back to the
    pool (docs/providers.md "Respecting the provider").

    A provider (or a proxy before it) that sends more than one answer to one request leaves the extra bytes in the
    connection's parser, and httpcore would read them as the answer to the next request on that connection, another
    caller's: such data is never an answer, and the connection is out of step. h11 keeps them as its
    ``trailing_data``, and its ``send_failed`` puts the connection in error, which httpcore's close of the response
    turns into closing the connection. A few attribute reads per call; a stream of another kind (HTTP/2, a test's)
    has no such parser and is left alone."""
    node: Any = stream
    for _ in range(_STREAM_LINKS_MAX):
        state = getattr(node, "_h11_state", None)
        if state is not None:
            if isinstance(state, h11.Connection) and state.their_state is h11.DONE and state.trailing_data[0]:
                state.send_failed()
                return True
            return False
        node = next((link for link in (getattr(node, name, None) for name in _STREAM_LINKS) if link is not None),
                    None)
        if node is None:
            return False
    return False


# Headers giving the wait in milliseconds, which the providers' own SDKs read before ``Retry-After`` (OpenAI's and
# Anthropic's send ``retry-after-ms`` beside it, Azure's ``x-ms-retry-after-ms``): finer, and sent where no
# ``Retry-After`` is.
_RETRY_AFTER_MS_HEADERS = ("retry-after-ms", "x-ms-retry-after-ms")


def retry_after_of(headers: httpx.Headers, *, rate_limited: bool = False) -> float | None:
    """Seconds an answer's headers ask to wait: a millisecond header (:data:`_RETRY_AFTER_MS_HEADERS`) when it
    holds a number, else ``Retry-After`` (:func:`parse_retry_after`), else, for a 429 (``rate_limited``), when the
    exhausted rate limit resets (:func:`rate_limit_reset_of`); capped at :data:`RETRY_AFTER_MAX_S`."""
    for name in _RETRY_AFTER_MS_HEADERS:
        value = headers.get(name)
        if value and len(value) <= 32:
            try:
                milliseconds = float(value)
            except ValueError:
                continue
            if math.isfinite(milliseconds):
                return min(max(milliseconds / 1000, 0.0), RETRY_AFTER_MAX_S)
    seconds = parse_retry_after(headers.get("Retry-After"))
    if seconds is None and rate_limited:
        return rate_limit_reset_of(headers)
    return seconds


# The rate limits OpenAI (and OpenAI-compatible servers: Groq, Together, …) report on every answer, each with
# ``x-ratelimit-remaining-<limit>`` and ``x-ratelimit-reset-<limit>``, the time until it is whole again as a Go
# duration ("1s", "6m0s", "20ms", "2m59.56s").
_RATE_LIMITS = ("requests", "tokens")
_GO_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:h|ms|m|s|us|µs|ns))+")
_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_GO_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_go_duration(value: str | None) -> float | None:
    """Seconds of a Go duration (``"6m0s"``, ``"20ms"``, ``"1h2m3.5s"``); ``None`` when absent or anything else."""
    if not value or len(value) > 32:
        return None
    text = value.strip()
    if not _GO_DURATION.fullmatch(text):
        return None
    return math.fsum(float(number) * _GO_UNIT_S[unit] for number, unit in _GO_DURATION_PART.findall(text))


def rate_limit_reset_of(headers: httpx.Headers) -> float | None:
    """Seconds until a 429's exhausted rate limit resets (docs/reliability.md "Polite retries"), from the
    ``x-ratelimit-*`` headers (:data:`_RATE_LIMITS`): the latest reset of the limits with none remaining; when
    none shows 0, the token limit's (the request needs more tokens than remain) unless only the request limit
    reports; capped at :data:`RETRY_AFTER_MAX_S`. ``None`` without a readable reset."""
    resets: dict[str, float] = {}
    remaining: dict[str, str] = {}
    for limit in _RATE_LIMITS:
        seconds = parse_go_duration(headers.get(f"x-ratelimit-reset-{limit}"))
        if seconds is not None:
            resets[limit] = seconds
            remaining[limit] = (headers.get(f"x-ratelimit-remaining-{limit}") or "").strip()
    exhausted = [seconds for limit, seconds in resets.items() if remaining[limit] == "0"]
    if not exhausted:  # a request limit with requests left is not what refused the call
        exhausted = [seconds for limit, seconds in resets.items()
                     if not (limit == "requests" and remaining[limit].isdigit())]
    return min(max(exhausted), RETRY_AFTER_MAX_S) if exhausted else None


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date), capped at
    :data:`RETRY_AFTER_MAX_S`; ``None`` when absent or unreadable."""
    if not value or len(value) > 64:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


def _describe(exc: Exception, secrets: Iterable[str | None]) -> str:
    return safe_message(f"{type(exc).__name__}: {exc}", secrets)


async def _read_bounded(response: httpx.Response, max_body_bytes: int) -> bytes:
    """The answer's body, at most ``max_body_bytes``: a longer answer (2xx) is ``bad_response``; of a longer error
    (any other status), only the first ``max_body_bytes`` are read, since its body is read for its message only
    and the error is the one its status means (a 429 or a 503 with a large page of a gateway before it)."""
    answer = 200 <= response.status_code < 300
    declared = response.headers.get("Content-Length", "")
    if answer and declared.isdigit() and int(declared) > max_body_bytes:
        raise ProviderError(BAD_RESPONSE, f"response body exceeds {max_body_bytes} bytes",
                            http_status=response.status_code)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_body_bytes:
            if answer:
                raise ProviderError(BAD_RESPONSE, f"response body exceeds {max_body_bytes} bytes",
                                    http_status=response.status_code)
            chunks.append(chunk[:max_body_bytes - (size - len(chunk))])
            break  # the rest is not read: the response's close closes its connection
        chunks.append(chunk)
    return b"".join(chunks)


def _parsed_or_none(body: bytes | str) -> Any:
    """``json.loads(body)``, or ``None`` when ``body`` is not JSON, which includes JSON nested deeper than the
    parser's recursion allows (``jsonutil.loads_within``; ``[`` repeated 100 000 times raised ``RecursionError``): an error
    body is the provider's text, and whatever it holds, the call's failure is still the status's
    (docs/providers.md "Errors")."""
    try:
        return loads_within(body)
    except ValueError:  # jsonutil.NestedTooDeep among them
        return None


def error_detail(body: bytes) -> str:
    """The provider's error text: ``error.message`` / ``error`` / ``message`` / ``detail`` of a JSON
    body, else the raw text; its start only (:func:`bounded_text`), which is what its kind is read from."""
    text = body.decode("utf-8", errors="replace")
    parsed = _parsed_or_none(text)
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return bounded_text(error["message"])
        for key in ("error", "message", "detail"):
            if isinstance(parsed.get(key), str):
                return bounded_text(parsed[key])
        problems = _validation_problems(parsed.get("detail"))
        if problems:
            return bounded_text(problems)
    return bounded_text(text)


def _validation_problems(detail: Any) -> str | None:
    """``where: what`` of each entry of a validation error list (FastAPI's 422 ``{"detail": [{"loc", "msg", "input"},
    …]}``, what vLLM and most Python model servers answer a malformed request with), or ``None``. The entries' ``input``
    echoes the request, the transcript included: read as the error's text, a word of the transcript ("context") made
    a request the server could not parse a context overflow."""
    if not isinstance(detail, list):
        return None
    problems = []
    for entry in detail:
        if isinstance(entry, dict) and isinstance(entry.get("msg"), str):
            where = entry.get("loc")
            location = ".".join(str(part) for part in where) if isinstance(where, list) else ""
            problems.append(f"{location}: {entry['msg']}" if location else entry["msg"])
    return "; ".join(problems) or None


def error_object(body: bytes, marker: bytes) -> dict[str, Any] | None:
    """The ``error`` object of a JSON answer ``body`` that holds ``marker`` (looked for before parsing: most
    answers do not), else None."""
    if marker not in body:
        return None
    parsed = _parsed_or_none(body)
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, dict) else None


# OpenAI's 429 for an account without credit (``error.code`` / ``error.type``): no wait makes it pass.
_OUT_OF_CREDIT_CODE = "insufficient_quota"


def _out_of_credit(body: bytes) -> bool:
    error = error_object(body, _OUT_OF_CREDIT_CODE.encode("ascii"))
    return error is not None and _OUT_OF_CREDIT_CODE in (error.get("code"), error.get("type"))


# Anthropic's 400 for an account without credit ("Your credit balance is too low to access the Anthropic API."):
# no other request to that account passes either.
OUT_OF_CREDIT_WORDS = re.compile(r"credit balance is too low", re.IGNORECASE)


def kind_for_status(status: int, detail: str, body: bytes = b"") -> str:
    """The router's error kind of an HTTP error ``status`` whose error text is ``detail`` (docs/providers.md
    "Errors"): a redirect (3xx, never followed) → bad_request: the offer's ``base_url`` is not the API's address,
    which no retry and no other caller's call changes; 408 → timeout; 429 → rate_limit, unless the body says the
    account is out of credit (OpenAI's ``insufficient_quota``); 401/403, 402 (OpenRouter: no credits left) and a 400
    saying the credit balance is too low (Anthropic) → auth_error; 400/413/422 mentioning context or tokens →
    context_overflow; other 4xx → bad_request; 5xx (and anything else) → upstream_error."""
    if 300 <= status < 400:
        return BAD_REQUEST
    if status == 408:
        return TIMEOUT
    if status == 429:
        return AUTH_ERROR if _out_of_credit(body) else RATE_LIMIT
    if status in (401, 402, 403) or status == 400 and OUT_OF_CREDIT_WORDS.search(detail):
        return AUTH_ERROR
    if status in (400, 413, 422) and CONTEXT_OVERFLOW_WORDS.search(detail):
        return CONTEXT_OVERFLOW
    if 400 <= status < 500:
        return BAD_REQUEST
    return UPSTREAM_ERROR


def error_for_status(status: int, body: bytes, secrets: Iterable[str | None] = (), *,
                     retry_after_s: float | None = None, location: str | None = None) -> ProviderError | None:
    """The :class:`ProviderError` an HTTP status means (:func:`kind_for_status`), or None for 2xx. A redirect
    says where it points (``location``), the address ``base_url`` should name."""
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        detail = f"redirected to {location or '(no Location)'}; redirects are not followed: set the offer's base_url"
    else:
        detail = error_detail(body)
    return ProviderError(kind_for_status(status, detail, body), safe_message(f"HTTP {status}: {detail}", secrets),
                         http_status=status, retry_after_s=retry_after_s)


def reply_error(reply: HttpReply, secrets: Iterable[str | None] = ()) -> ProviderError | None:
    """The :class:`ProviderError` of ``reply`` (:func:`error_for_status`), or None for 2xx: what every HTTP
    transport checks first."""
    return error_for_status(reply.status, reply.body, secrets, retry_after_s=reply.retry_after_s,
                            location=reply.location)


def status_of_error_object(payload: Any) -> int | None:
    """The HTTP status an answer's error object names in ``error.code`` (an integer, or its digits, from 400
    to 599), as OpenRouter's ``{"error": {"code": 502, "message": …}}``; None otherwise."""
    error = payload.get("error") if isinstance(payload, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and code.isascii() and code.isdigit() and len(code) == 3:
        code = int(code)
    return code if type(code) is int and 400 <= code <= 599 else None


async def bearer_headers(offer: Offer) -> tuple[dict[str, str], str | None]:
    """``({"Authorization": "Bearer <key>"}, key)`` with the offer's key (:func:`compactor.providers.keys.resolve_key`);
    ``({}, None)`` when the offer needs no key."""
    key = await resolve_key(offer)
    return ({"Authorization": f"Bearer {key}"}, key) if key else ({}, None)
