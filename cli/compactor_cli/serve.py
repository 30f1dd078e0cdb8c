"""``compactor serve``: the HTTP API on a local port, through the deployed function's own handler.

Each request becomes the API Gateway REST (v1 proxy) event stage ``v1`` would deliver (``/v1/compact``
arrives as ``path`` ``/compact``) and is answered by ``functions/compact/compact.handler`` in-process.
For people it also serves, outside the stage, the report page at ``/`` (with ``POST /report``) and Swagger
UI at ``/docs`` (``compactor_cli.serve_page``). Like API Gateway, the server answers some requests itself:
403 ``{"message": "Forbidden"}`` without one of the ``--api-key`` values (when set; in ``x-api-key`` or
``Authorization: Bearer``), 400 ``ambiguous_api_key`` for two different keys (the authorizer's deny, deployed), and
413 for a body over the limit, before reading it (a chunked body, which it reads as API Gateway does: as soon as its
chunks pass the limit). A presented key's id
(``compactor_aws.caller.local_key_id``) goes into the event's ``requestContext.identity.apiKeyId``, where
API Gateway puts the key id. Unlike API Gateway, it also refuses what a page of another site could make the user's
browser send it (``cross_site_refusal``: 403 ``cross_site_request``; without a key, 415 for a body without a
``Content-Type``; docs/api.md), since it runs on the user's machine, without a key by default.

Concurrent requests are answered concurrently, the way Lambda scales out: ``--workers N`` instances of
the function, each a process of its own that imports the handler once and answers one event at a time
(docs/performance.md). Processes, not threads: the handler's Powertools resolver keeps the current event
in class attributes, so two events in one process would read each other's. A request goes to the least
busy instance (among idle ones the one used last, which is warm), whatever its ``Idempotency-Key``:
the instances share the idempotency records and stored responses (files in a temporary directory,
``COMPACTOR_IDEMPOTENCY_DIR``, as the deployed functions share a table), so a key's retry is replayed, or
answered 409 while the key's first request runs, or 422 with another body, on any instance; and they
share one ledger file (``--ledger``, else a temporary one). ``create_server`` without ``workers`` runs
one instance in-process on one long-lived thread (tests).

The function's environment from ``template.yaml`` (Globals merged, parameters at their defaults unless
``--param K=V``) is applied before the handler is imported, except variables already set in the shell
and the names of the stack's tables and buckets: billing and idempotency run on local stores (the
ledger in ``--ledger FILE``, else in a temporary file, or in memory in-process) unless the shell names
tables (docs/billing.md).
"""

from __future__ import annotations

import argparse
import base64
import hmac
import ipaddress
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from email.message import Message
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from compactor import http_api
from compactor.catalog import CATALOG_ENV, CatalogError, load_catalog
from compactor.errors import (
    AmbiguousApiKey,
    CrossSiteRequest,
    InternalError,
    InvalidRequest,
    LengthRequired,
    MalformedRequest,
    NotFound,
    RequestTooLarge,
    UnsupportedMediaType,
)
from compactor.idempotency import DIR_ENV as IDEMPOTENCY_DIR_ENV
from compactor.provider_failures import Cause, failure_causes
from compactor_aws.caller import local_key_id, presented_key
from compactor_aws.ledger import LEDGER_FILE_ENV
from compactor_aws.observability import watching_calls
from compactor_cli import serve_page
from compactor_cli.invoke import STACK_RESOURCE_VARIABLES, _parse_overrides
from compactor_cli.lambda_runtime import LambdaHandler, LocalLambdaContext, load_handler
from compactor_cli.main import whole_number
from compactor_cli.report import base_url_of
from compactor_cli.sam_template import Template, TemplateError, as_string

FUNCTION_LOGICAL_ID = "CompactFunction"
FUNCTION_HANDLER = "compact.handler"
FUNCTION_TIMEOUT_S = 60
"""The deployed function's Timeout (template.yaml Globals); the local context counts down from it."""
LISTEN_BACKLOG = 128
"""Pending connections the socket queues (the stdlib's 5 resets a 50-client burst)."""
READ_TIMEOUT_S = 30.0
"""A client that sends nothing for this long is disconnected (a stalled upload cannot hold a thread)."""
MAX_DRAIN_BYTES = 64 * 1024 * 1024
"""An oversized body up to this size is read and discarded before the 413, so the client sees the answer."""
MAX_CHUNK_LINE = 4096
"""Longest chunk-size line (with its extensions) or trailer line of a chunked body."""
MAX_TRAILER_LINES = 64
DEFAULT_WORKERS = 4
"""Function instances ``compactor serve`` runs (``--workers``): concurrent requests answered at once."""
_LAMBDA_FAILURE_BODY = {"message": "Internal server error"}
_BODILESS_STATUSES = frozenset({204, 304})
_STAGE_PREFIX = f"/{http_api.STAGE}"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_OWN_SITE = frozenset({"same-origin", "none"})
"""``Sec-Fetch-Site`` of a request this server's own page made, or one the user made (typed, bookmarked)."""


def default_code_dir() -> Path:
    """``functions/compact`` of the checkout this package runs from (or of the working directory)."""
    checkout = Path(__file__).resolve().parents[2] / "functions" / "compact"
    return checkout if checkout.is_dir() else Path.cwd() / "functions" / "compact"


def default_template() -> Path:
    """``template.yaml`` of the checkout this package runs from (or of the working directory)."""
    checkout = Path(__file__).resolve().parents[2] / "template.yaml"
    return checkout if checkout.is_file() else Path.cwd() / "template.yaml"


def template_environment(template: Path, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """``CompactFunction``'s resolved environment variables in ``template``, as ``compactor invoke`` sets them."""
    properties = Template.load(template, dict(overrides or {})).function_properties(FUNCTION_LOGICAL_ID)
    declared = (properties.get("Environment") or {}).get("Variables") or {}
    return {key: as_string(value) for key, value in declared.items() if key not in STACK_RESOURCE_VARIABLES}


def apply_environment(variables: Mapping[str, str],
                      environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each of ``variables`` the environment does not have yet (the shell wins); the ones set."""
    target = os.environ if environ is None else environ
    applied = {key: value for key, value in variables.items() if key not in target}
    target.update(applied)
    return applied


Answered = tuple[dict[str, Any], list[tuple[Cause, int]]]
"""An invocation's proxy response, and why its model calls fell back (``compactor.provider_failures``)."""


def invoke(handler: LambdaHandler, event: dict[str, Any]) -> Answered:
    """One invocation; the context's clock starts when an instance picks the event up. The causes of
    failed model calls come from the records of the calls the handler made (never from its response)."""
    causes: list[tuple[Cause, int]] = []
    with watching_calls(lambda record: causes.extend(failure_causes(record.nodes, base_url_of))):
        return handler(event, LocalLambdaContext(FUNCTION_LOGICAL_ID, FUNCTION_TIMEOUT_S)), causes


class InProcess:
    """One instance of the function in this process, on one long-lived thread (as a warm Lambda
    container runs its events one after another)."""

    def __init__(self, handler: LambdaHandler):
        self.handler = handler
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lambda")

    def invoke(self, event: dict[str, Any]) -> Answered:
        return self._thread.submit(invoke, self.handler, event).result()

    def report(self, payload: bytes) -> tuple[int, str, bytes]:
        return self._thread.submit(serve_page.report, payload).result()

    def openapi_text(self) -> str:
        return self._thread.submit(serve_page.openapi_text).result()

    def close(self) -> None:
        self._thread.shutdown(wait=True)


_worker_handler: LambdaHandler | None = None  # the handler of this process when it is a worker instance


def _start_worker(code_dir: str, environment: dict[str, str]) -> None:
    """A worker process's initializer: its environment, then the handler imported once."""
    global _worker_handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops its workers
    parent = multiprocessing.parent_process()
    if parent is not None:  # a server killed outright leaves no instance behind
        threading.Thread(target=_exit_with, args=(parent.sentinel,), name="parent-watch", daemon=True).start()
    os.environ.update(environment)
    _worker_handler = load_handler(Path(code_dir), FUNCTION_HANDLER)


def _exit_with(parent_sentinel: int) -> None:
    multiprocessing.connection.wait([parent_sentinel])
    os._exit(0)


def _worker_invoke(event: dict[str, Any]) -> Answered:
    assert _worker_handler is not None, "not a worker process"
    return invoke(_worker_handler, event)


def _worker_ready() -> bool:
    return _worker_handler is not None


class WorkerPool:
    """``size`` instances of the function, each a process of its own that imports the handler once and
    answers one event at a time. All start before the server listens, so an import error stops
    ``compactor serve`` at once and no request waits for an instance's cold start."""

    def __init__(self, size: int, code_dir: Path):
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        # Removed when the server stops: the temporary ledger and idempotency records.
        self._shared_dir = tempfile.TemporaryDirectory(prefix="compactor-serve-")
        environment: dict[str, str] = {}  # set in each instance
        if LEDGER_FILE_ENV not in os.environ:
            # The instances share one ledger, so that GET /usage counts every instance's calls.
            environment[LEDGER_FILE_ENV] = str(Path(self._shared_dir.name) / "ledger.jsonl")
        if not os.environ.get(IDEMPOTENCY_DIR_ENV):
            # The instances share the idempotency records (unless the shell names a table) and the large
            # stored responses (unless it names a bucket), so that any instance can take any request: a
            # key's retry finds the key's record wherever its first request ran (docs/billing.md).
            environment[IDEMPOTENCY_DIR_ENV] = str(Path(self._shared_dir.name) / "idempotency")
        self._start: Callable[[], Executor] = lambda: ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
            initargs=(str(code_dir), environment))
        self._instances = [self._start() for _ in range(size)]
        self._busy = [0] * size
        self._used = [0] * size  # when each instance was last given a call (a count of calls)
        self._calls = 0
        self._lock = threading.Lock()
        try:
            for started in [instance.submit(_worker_ready) for instance in self._instances]:
                started.result()
        except BaseException:
            self.close()
            raise

    def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            # The least busy; among equals the one used last, which is warm (as Lambda reuses instances).
            index = min(range(len(self._instances)), key=lambda i: (self._busy[i], -self._used[i]))
            self._calls += 1
            self._used[index] = self._calls
            self._busy[index] += 1
            instance = self._instances[index]
        try:
            return instance.submit(function, *args).result()
        except BrokenProcessPool:  # the instance died (like a crashed container): replace it, fail this call
            with self._lock:
                if self._instances[index] is instance:
                    self._instances[index] = self._start()
            raise
        finally:
            with self._lock:
                self._busy[index] -= 1

    @property
    def in_flight(self) -> int:
        """Calls given to an instance and not answered yet (running or waiting for their instance)."""
        with self._lock:
            return sum(self._busy)

    def invoke(self, event: dict[str, Any]) -> Answered:
        result: Answered = self._run(_worker_invoke, event)
        return result

    def report(self, payload: bytes) -> tuple[int, str, bytes]:
        result: tuple[int, str, bytes] = self._run(serve_page.report, payload)
        return result

    def openapi_text(self) -> str:
        """The API document, from an instance: the handler is imported there, not in the server's process."""
        result: str = self._run(serve_page.openapi_text)
        return result

    def close(self) -> None:
        for instance in self._instances:
            instance.shutdown(wait=True, cancel_futures=True)
        self._shared_dir.cleanup()


class CompactorServer(ThreadingHTTPServer):
    """A threading HTTP server holding the function's instances (a handler: one, in-process) and the
    accepted API keys (none: open)."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], handler: LambdaHandler | WorkerPool | InProcess,
                 api_key: str | list[str] | None):
        # Set before binding: a failed bind calls server_close(), which shuts the instances down.
        self.instances = handler if isinstance(handler, (WorkerPool, InProcess)) else InProcess(handler)
        self.api_keys = [api_key] if isinstance(api_key, str) else list(api_key or [])
        super().__init__(address, _RequestHandler)

    def server_close(self) -> None:
        super().server_close()
        self.instances.close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}{_STAGE_PREFIX}/"


class _RequestHandler(BaseHTTPRequestHandler):
    server: CompactorServer
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY on every accepted connection: the handler writes a response's headers and its body in two sends,
    # and on a kept-alive connection Nagle's algorithm held the body until the client acknowledged the headers,
    # which Linux delays up to 40 ms: every request after a connection's first waited about 40 ms for nothing.
    disable_nagle_algorithm = True
    timeout = READ_TIMEOUT_S  # socket timeout of every read (request line, headers, body)

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        self._responded = False
        try:
            self._handle()
        except OSError:  # the client went away (or timed out) mid-request: no one to answer
            self.close_connection = True
        except Exception as exc:  # a defect of the server: a 500 answer, never a dropped connection
            # Type and frames locate the failure; the message is left out, it may quote a request.
            self.log_error("unhandled %s:\n%s", type(exc).__name__, "".join(traceback.format_tb(exc.__traceback__)))
            if self._responded:  # a half-written answer cannot be replaced: end the connection
                self.close_connection = True
            else:
                self._send_json(*InternalError().answer(), close=True)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = do_GET

    def __getattr__(self, name: str) -> Any:
        # Any other method (http.server answered it 501 with an HTML page) goes to the function too, which
        # answers what it answers for every method without a route: 404 JSON.
        if name.startswith("do_"):
            return self.do_GET
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What ``http.server`` answers itself, for a request it cannot parse (a malformed or too long request line,
        header lines too long or too many, another HTTP version): JSON with the connection closed, like every other
        answer; it was an HTML page, which a client reading the API's errors as JSON cannot read."""
        self.log_error("code %d, message %s", code, message)
        self._send_json(*MalformedRequest(code, message or self.responses.get(code, ("error",))[0]).answer(),
                        close=True)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._responded = True
        super().send_response(code, message)

    def _write_body(self, payload: bytes) -> None:
        if self.command != "HEAD":  # a HEAD answer has the GET answer's headers and no body (RFC 9110)
            self.wfile.write(payload)

    def _accepted_key(self) -> tuple[bool, str | None]:
        """(whether the request may pass, the key it presented); raises
        :class:`~compactor.errors.AmbiguousApiKey` when it presents two different keys, with or without
        ``--api-key``: it took the last ``x-api-key``, or the ``x-api-key`` over a different bearer token."""
        key = presented_key(self.headers.items())
        if not self.server.api_keys:
            return True, key
        presented = (key or "").encode("utf-8", "surrogateescape")
        matches = [hmac.compare_digest(presented, accepted.encode("utf-8")) for accepted in self.server.api_keys]
        return any(matches), key

    def _handle(self) -> None:
        url = urlsplit(self.path)
        if self.command in ("GET", "HEAD") and url.path in ("/", "/docs"):  # pages for people: static, no caller data
            page = (serve_page.index_html(bool(self.server.api_keys)) if url.path == "/"
                    else serve_page.swagger_html(self.server.instances.openapi_text()))
            self._send(200, "text/html; charset=utf-8", page.encode("utf-8"))
            return
        refused = cross_site_refusal(self.command, self.headers, keyed=bool(self.server.api_keys))
        if refused is not None:
            self._send_json(*refused.answer(), close=True)
            return
        try:
            allowed, key = self._accepted_key()
        except AmbiguousApiKey as refused:  # two different keys: the deployed API's 400 too (docs/billing.md)
            self._send_json(*refused.answer(), close=True)
            return
        if not allowed:
            self._send_json(403, http_api.FORBIDDEN_BODY, close=True)
            return
        local = self.command == "POST" and url.path == serve_page.REPORT_PATH
        if not local and url.path != _STAGE_PREFIX and not url.path.startswith(_STAGE_PREFIX + "/"):
            self._send_json(404, NotFound.route(self.command, url.path).body(), close=True)
            return
        if local and self.headers.get_content_type() != http_api.JSON_CONTENT_TYPE:
            # Only the report page's fetch, which declares JSON, may run a compaction here: a form or a typeless
            # fetch on any other site could post one without a preflight (docs/report.md).
            self._send_json(*UnsupportedMediaType.content_type(self.headers.get("Content-Type") or "").answer(),
                            close=True)
            return
        body = self._read_body()
        if body is None:  # refused and answered
            return
        if body and not self.server.api_keys and not (self.headers.get("Content-Type") or "").strip():
            # Without a key, a body must declare JSON (the function refuses every other type): a page on any site
            # can make the browser post one without a type, and without a CORS preflight (docs/api.md).
            self._send_json(*UnsupportedMediaType.undeclared().answer())
            return
        if local:  # the report page's compaction, on one of the function's instances
            self._send(*self.server.instances.report(body))
            return
        event = http_api.rest_proxy_event(
            method=self.command,
            resource_path=url.path[len(_STAGE_PREFIX):] or "/",
            query=parse_qs(url.query, keep_blank_values=True),
            headers=self.headers.items(),
            body=body,
            source_ip=self.client_address[0],
        )
        event["requestContext"]["path"] = url.path  # as sent: the function's 404 and 405 name it ("/v1", not "/v1/")
        if key is not None:
            event["requestContext"]["identity"]["apiKeyId"] = local_key_id(key)
        response, causes = self._invoke(event)
        for cause, count in causes:  # why model calls fell back (the words never hold a key; docs/providers.md)
            self.log_message("model call fell back x%d: %s (offer %s); fix: %s", count, cause.cause, cause.offer,
                             cause.fix)
        self._send_proxy_response(response)

    def _read_body(self) -> bytes | None:
        """The request's body, from its ``Content-Length`` or its chunks (``Transfer-Encoding: chunked``, which
        API Gateway takes too: streaming clients send it when they do not know the length in advance); None
        once a refusal is answered: 413 over the limit, 400 for a malformed length or chunk, two different lengths,
        or a body that ends before its length (it was compacted as it came: 200 for a body padded past its end, else
        the 422 ``json_invalid`` of a body the client never sent), 411 for a transfer coding other than chunked."""
        # Every line of each (``get`` reads the first): the last of two was dropped. Two transfer codings are a list
        # (RFC 9110 5.3), "chunked, gzip" not "chunked"; two different lengths are a 400 (RFC 9112 6.3): the first
        # was read, and the rest of the body was then read as the next request on the connection.
        coding = ", ".join(value.strip() for value in self.headers.get_all("Transfer-Encoding", [])).lower()
        lengths = {value.strip() for value in self.headers.get_all("Content-Length", [])}
        if coding:
            if coding != "chunked":
                self._send_json(*LengthRequired("send the body with a Content-Length, or chunked").answer(),
                                close=True)
                return None
            return self._read_chunks()
        if len(lengths) > 1:
            self._send_json(*InvalidRequest(f"Content-Length was sent with {len(lengths)} different values: send it "
                                            "once").answer(), close=True)
            return None
        declared = lengths.pop() if lengths else "0"
        # Digits only (RFC 9110), as many as a length can have: int() also read "1_5" and "+15" as 15.
        if not (declared.isascii() and declared.isdigit()) or len(declared) > 18:
            self._send_json(*InvalidRequest("invalid Content-Length").answer(), close=True)
            return None
        length = int(declared)
        if length > http_api.MAX_BODY_BYTES:
            self._drain(length)
            self._send_json(*RequestTooLarge.over(http_api.MAX_BODY_BYTES).answer(), close=True)
            return None
        body = self.rfile.read(length)
        if len(body) < length:  # the client ended its side early: what came is not the request it declared
            self._send_json(*InvalidRequest(f"the body ended after {len(body)} of its Content-Length {length} bytes")
                            .answer(), close=True)
            return None
        return body

    def _read_chunks(self) -> bytes | None:
        """A chunked body (RFC 9112 section 7.1), read within the body limit; past the limit the rest is read
        and discarded (up to MAX_DRAIN_BYTES) so that the client reads the 413."""
        parts: list[bytes] = []
        received = 0
        while True:
            size_line = self.rfile.readline(MAX_CHUNK_LINE + 1)
            size = _chunk_size(size_line)
            if size is None or len(size_line) > MAX_CHUNK_LINE:
                self._send_json(*InvalidRequest("invalid chunked body").answer(), close=True)
                return None
            if size == 0:
                break
            received += size
            if received > MAX_DRAIN_BYTES:
                break
            if received > http_api.MAX_BODY_BYTES:  # over the limit: read on without keeping
                self._drain(size)
            else:
                parts.append(self.rfile.read(size))
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                if received > http_api.MAX_BODY_BYTES:
                    break
                self._send_json(*InvalidRequest("invalid chunked body").answer(), close=True)
                return None
        if received > http_api.MAX_BODY_BYTES:
            self._send_json(*RequestTooLarge.over(http_api.MAX_BODY_BYTES).answer(), close=True)
            return None
        for _ in range(MAX_TRAILER_LINES):  # the trailer section, up to its empty line, is read and ignored
            if self.rfile.readline(MAX_CHUNK_LINE + 1) in (b"\r\n", b"\n", b""):
                break
        return b"".join(parts)

    def _drain(self, length: int) -> None:
        """Read and discard an oversized body (up to MAX_DRAIN_BYTES), so that the client, still sending,
        reads the 413 instead of a reset connection."""
        left = min(length, MAX_DRAIN_BYTES)
        try:
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:  # timed out or reset: answer anyway
            pass

    def _invoke(self, event: dict[str, Any]) -> Answered:
        try:
            return self.server.instances.invoke(event)
        except Exception:  # what API Gateway answers when the function itself fails
            self.log_error("handler raised; answering 502")
            return http_api.proxy_response(502, _LAMBDA_FAILURE_BODY), []

    def _send_proxy_response(self, response: dict[str, Any]) -> None:
        body = response.get("body") or ""
        payload = base64.b64decode(body) if response.get("isBase64Encoded") else body.encode("utf-8")
        headers: dict[str, list[str]] = {name: [value] for name, value in (response.get("headers") or {}).items()}
        for name, values in (response.get("multiValueHeaders") or {}).items():
            headers[name] = list(values)
        status = int(response.get("statusCode", 200))
        self.send_response(status)
        for name, values in headers.items():
            if name.lower() not in ("content-length", "connection"):
                for value in values:
                    self.send_header(name, str(value))
        if status in _BODILESS_STATUSES:  # no Content-Length and no body (RFC 9110: OPTIONS is answered 204)
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self._write_body(payload)

    def _send(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self._write_body(payload)

    def _send_json(self, status: int, body: dict[str, Any], *, close: bool = False) -> None:
        payload = json.dumps(body, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", http_api.JSON_CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        if close:  # an unread request body must not be parsed as the next request
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self._write_body(payload)


def _chunk_size(line: bytes) -> int | None:
    """The size a chunk-size line declares (hex digits, extensions after ``;`` ignored); None when malformed."""
    digits = line.split(b";", 1)[0].strip()
    if not digits or len(digits) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in digits):
        return None
    return int(digits, 16)


def cross_site_refusal(method: str, headers: Message, *, keyed: bool) -> CrossSiteRequest | None:
    """Why a request a browser sent for another site's page is refused (403), or None (docs/api.md).

    Without ``--api-key``, the ``Host`` must be a local name (``localhost``) or an IP address: a name of another
    site that resolves to this machine (DNS rebinding) makes the browser treat the server as that site's, whose
    pages could then read every answer. With or without a key, a request other than ``GET``, ``HEAD`` or
    ``OPTIONS`` is refused when the browser says another site's page sent it: ``Sec-Fetch-Site`` other than
    ``same-origin`` or ``none``, or an ``Origin`` that is not this server's. API clients send neither header."""
    host = (headers.get("Host") or "").strip()
    if not keyed and host and not _local_host(host):
        return CrossSiteRequest.host(host)
    if method in _SAFE_METHODS:
        return None
    site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
    if site and site not in _OWN_SITE:
        return CrossSiteRequest.site(site)
    origin = headers.get("Origin")
    if origin is not None:
        try:
            sent = urlsplit(origin.strip())
        except ValueError:  # not a URL ("http://[::1"): no page of this server's; it was a 500 internal_error
            return CrossSiteRequest.origin(origin)
        if sent.scheme != "http" or not host or sent.netloc.lower() != host.lower():
            return CrossSiteRequest.origin(origin)
    return None


def _local_host(host: str) -> bool:
    """Whether a ``Host`` header (with its port) names this machine without DNS: ``localhost`` or an IP address."""
    if any(character in host for character in "@/\\?#"):
        return False
    try:
        parts = urlsplit("//" + host)
        name = parts.hostname or ""
        parts.port  # noqa: B018 (a malformed port raises)
    except ValueError:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def create_server(host: str = "127.0.0.1", port: int = 8787, api_key: str | list[str] | None = None,
                  code_dir: Path | None = None, environment: Mapping[str, str] | None = None,
                  workers: int | None = None) -> CompactorServer:
    """A ready (not yet serving) server; ``port`` 0 picks a free port (see ``server_address``).

    ``environment`` (see :func:`template_environment`) is applied to this process, without overriding
    what is already set, before the handler is imported. ``workers``: that many instances in processes
    of their own (:class:`WorkerPool`); None: one instance in this process."""
    if environment:
        apply_environment(environment)
    code_dir = code_dir or default_code_dir()
    if workers is None:
        return CompactorServer((host, port), load_handler(code_dir, FUNCTION_HANDLER), api_key)
    return CompactorServer((host, port), WorkerPool(workers, code_dir), api_key)  # a failed bind closes the pool


def _positive(text: str) -> int:
    return whole_number(text, 1)


def _port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535: a larger one was a traceback from the socket (OverflowError)."""
    return whole_number(text, 0, 65535)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``serve`` subcommand."""
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8787, help="port (default 8787)")
    parser.add_argument("--api-key", action="append", default=[], metavar="KEY",
                        help="require this key (x-api-key or Authorization: Bearer) on every request, like the "
                             "deployed stage; repeatable, one caller per key")
    parser.add_argument("--ledger", type=Path, metavar="FILE",
                        help="keep the usage ledger in this JSON-lines file (default: a temporary file the worker "
                             "instances share, removed when the server stops); "
                             "read it with compactor usage --ledger FILE")
    parser.add_argument("--workers", type=_positive, default=DEFAULT_WORKERS, metavar="N",
                        help=f"instances of the function, each a process answering one request at a time "
                             f"(default {DEFAULT_WORKERS})")
    parser.add_argument("--code-dir", type=Path, help="directory of compact.py (default: functions/compact)")
    parser.add_argument("-t", "--template", type=Path,
                        help="SAM template whose CompactFunction environment is applied (default: template.yaml)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="template parameter override (repeatable), e.g. FlowBudgetMs=40000")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``compactor serve``: serve until interrupted (2 on a bad template, --param, --code-dir,
    --ledger or catalog, or a port that cannot be listened on)."""
    template = args.template or default_template()
    environment: dict[str, str] = {}
    if args.template is not None or template.is_file() or args.param:
        try:
            environment = template_environment(template, _parse_overrides(args.param))
        except (TemplateError, OSError) as exc:
            print(f"compactor serve: {exc}", file=sys.stderr)
            return 2
    else:
        print(f"compactor serve: no {template}; the function's template environment is not applied",
              file=sys.stderr)
    if args.ledger is not None:
        from compactor_cli.usage_cmd import ledger_file_problem

        problem = ledger_file_problem(args.ledger, may_be_new=True)  # else every billed call fails, or is
        if problem:                                                  # appended to a file that is no ledger
            print(f"compactor serve: --ledger {args.ledger}: {problem}", file=sys.stderr)
            return 2
        environment[LEDGER_FILE_ENV] = str(args.ledger)
    catalog = os.environ.get(CATALOG_ENV) or environment.get(CATALOG_ENV)  # the shell's wins, as applied
    if catalog:  # else the server starts and answers every compaction 500, naming nothing
        try:
            load_catalog(catalog)
        except CatalogError as exc:
            print(f"compactor serve: {CATALOG_ENV}: {exc}", file=sys.stderr)
            return 2
    module = FUNCTION_HANDLER.partition(".")[0] + ".py"
    if args.code_dir is not None and not (args.code_dir / module).is_file():  # else every worker fails to start
        print(f"compactor serve: --code-dir {args.code_dir}: no {module} there (the API function's directory, "
              "functions/compact)", file=sys.stderr)
        return 2
    try:
        server = create_server(args.host, args.port, args.api_key, args.code_dir, environment, workers=args.workers)
    except OSError as exc:
        print(f"compactor serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    key_note = "API key required" if args.api_key else "no API key required"
    print(f"compactor serving {server.url} ({key_note}); Ctrl-C to stop", file=sys.stderr)
    root = server.url[:-len(_STAGE_PREFIX) - 1]
    print(f"  report page: {root}/   API reference: {root}/docs", file=sys.stderr)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the worker instances too, like Ctrl-C
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the server is closing
    raise KeyboardInterrupt
