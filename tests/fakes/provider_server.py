"""A fake model provider: a real HTTP server on 127.0.0.1 for offline tests.

It answers ``POST …/chat/completions`` (OpenAI-compatible), ``POST …/decisions`` (native
decisions), ``POST …/v1/messages`` (Anthropic Messages) and ``POST …/model/<id>/converse`` (Bedrock
Converse, for boto3 pointed here with ``endpoint_url=fake_provider.root_url``) on any path prefix,
records every request, and can be scripted per test::

    def test_something(fake_provider):            # fixture from tests/conftest.py
        offer = Offer(..., base_url=fake_provider.base_url)   # "http://127.0.0.1:<port>/v1"
        fake_provider.enqueue(Reply(429, {"error": {"message": "slow down"}}))  # next request
        fake_provider.enqueue(chat_reply('{"a": "b"}', cost=0.001))            # the one after
        fake_provider.responder = lambda req: Reply(200, ..., delay_s=2)       # when the queue is empty
        ...
        assert fake_provider.requests[0].json["model"] == "m"

Order of answers: queued replies first (FIFO, whatever the path), then ``responder`` if set, then
the canned default: a ``stop`` chat completion whose content is ``"{}"`` in JSON mode and
``"ok"`` otherwise, or a valid decision picking the first criterion / lowest score / 0.5.

Each request runs in its own thread, so a delayed reply never blocks others; :meth:`stop` interrupts
delays (the delayed connection is dropped without an answer) and never waits for handler threads.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeProviderServer", "RecordedRequest", "Reply", "anthropic_reply", "bedrock_error", "chat_reply",
           "converse_reply", "decision_reply"]


@dataclass
class Reply:
    """One scripted answer. ``body``: bytes/str are sent raw, anything else as JSON."""

    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    trickle_s: float = 0.0  # send the body in 20 pieces spread over this many seconds
    reset: bool = False  # drop the connection (TCP reset) instead of answering

    def encoded_body(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        return json.dumps(self.body).encode("utf-8")


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received. ``headers`` keys are lower-case; ``json`` is None if unparseable."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any


Responder = Callable[[RecordedRequest], Reply]


def chat_reply(content: str | None = "ok", *, finish_reason: str = "stop", model: str = "fake-model",
               prompt_tokens: int = 10, completion_tokens: int = 5, cached_tokens: int | None = None,
               cost: float | None = None, tool_calls: list[dict[str, Any]] | None = None,
               status: int = 200, delay_s: float = 0.0, reasoning_tokens: int | None = None,
               reasoning: dict[str, str] | None = None) -> Reply:
    """An OpenAI-style chat completion answer; a reasoning model's counts its ``reasoning_tokens`` (part of
    ``completion_tokens``) in ``usage.completion_tokens_details``; ``reasoning`` adds message fields carrying
    its reasoning text (``{"reasoning_content": ...}`` as vLLM and llama.cpp send it, ``{"reasoning": ...}``)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, **(reasoning or {})}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    if cost is not None:
        usage["cost"] = cost
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage,
    }
    return Reply(status, body, delay_s)


def decision_reply(answers: dict[str, Any], *, model: str = "fake-decider", input_tokens: int = 20,
                   output_tokens: int = 4, cost: float | None = None, status: int = 200,
                   delay_s: float = 0.0) -> Reply:
    """A native decision answer ``{model, answers, usage}``."""
    usage: dict[str, Any] = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    if cost is not None:
        usage["cost"] = cost
    return Reply(status, {"model": model, "answers": answers, "usage": usage}, delay_s)


def anthropic_reply(text: str = "ok", *, stop_reason: str = "end_turn", model: str = "fake-claude",
                    input_tokens: int = 10, output_tokens: int = 5, cache_read: int | None = None,
                    cache_write: int | None = None, status: int = 200, delay_s: float = 0.0,
                    thinking: str | None = None) -> Reply:
    """An Anthropic Messages answer with one text block (none when ``text`` is empty), after a ``thinking`` block
    when one is given (extended thinking)."""
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    if cache_write is not None:
        usage["cache_creation_input_tokens"] = cache_write
    body = {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [*([{"type": "thinking", "thinking": thinking, "signature": "c2ln"}] if thinking else []),
                        *([{"type": "text", "text": text}] if text else [])],
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage}
    return Reply(status, body, delay_s)


def converse_reply(text: str = "ok", *, stop_reason: str = "end_turn", input_tokens: int = 10,
                   output_tokens: int = 5, cache_read: int | None = None, cache_write: int | None = None,
                   delay_s: float = 0.0, reasoning: str | None = None) -> Reply:
    """A Bedrock Converse answer (the REST shape boto3 parses): one text block (none when ``text`` is empty), after
    a ``reasoningContent`` block when ``reasoning`` is given (Claude's extended thinking)."""
    usage: dict[str, Any] = {"inputTokens": input_tokens, "outputTokens": output_tokens,
                             "totalTokens": input_tokens + output_tokens + (cache_read or 0) + (cache_write or 0)}
    if cache_read is not None:
        usage["cacheReadInputTokens"] = cache_read
    if cache_write is not None:
        usage["cacheWriteInputTokens"] = cache_write
    content = [*([{"reasoningContent": {"reasoningText": {"text": reasoning, "signature": "c2ln"}}}] if reasoning
                 else []), *([{"text": text}] if text else [])]
    body = {"output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop_reason, "usage": usage, "metrics": {"latencyMs": 12}}
    return Reply(200, body, delay_s)


def bedrock_error(status: int, code: str, message: str) -> Reply:
    """A Bedrock error as the service sends it: the code in ``x-amzn-ErrorType``, the message in the body."""
    return Reply(status, {"message": message}, headers={"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/"})


def default_answers(questions: Any) -> dict[str, Any]:
    """Valid answers for ``questions``: first criterion, lowest score, noul 0.5."""
    answers: dict[str, Any] = {}
    for name, question in (questions or {}).items():
        kind = question.get("type") if isinstance(question, dict) else None
        if kind == "choice":
            answers[name] = {"type": "choice", "choice": next(iter(question.get("criteria") or {"": ""})),
                             "confidence": 1.0}
        elif kind == "score":
            answers[name] = {"type": "score", "score": 0, "confidence": 1.0}
        else:
            answers[name] = {"type": "noul", "noul": 0.5}
    return answers


def _default_reply(request: RecordedRequest) -> Reply:
    payload = request.json if isinstance(request.json, dict) else {}
    path = request.path.partition("?")[0]  # routed on the path, as a provider routes (a query is parameters)
    if path.endswith("/chat/completions"):
        json_mode = (payload.get("response_format") or {}).get("type") == "json_object"
        return chat_reply("{}" if json_mode else "ok", model=str(payload.get("model") or "fake-model"))
    if path.endswith("/decisions"):
        return decision_reply(default_answers(payload.get("questions")),
                              model=str(payload.get("model") or "fake-decider"))
    if path.endswith("/v1/messages"):
        return anthropic_reply(model=str(payload.get("model") or "fake-claude"))
    if path.endswith("/converse"):
        return converse_reply()
    return Reply(404, {"error": {"message": f"no route for {request.path}"}})


class _QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # The stdlib backlog of 5 drops bursts of concurrent calls (32 batches at once) as connection errors.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients dropping connections (timeouts, oversized answers) are expected here."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeProviderServer:
    """A scriptable provider on ``127.0.0.1:<ephemeral port>``; use as a context manager or
    :meth:`start`/:meth:`stop`. ``base_url`` ends in ``/v1``."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context  # a server context: HTTPS (its certificate's authority must be trusted)
        self.requests: list[RecordedRequest] = []
        self.responder: Responder | None = None
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("fake provider is not running")
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>`` (``https`` with a context; no path: a boto3 ``endpoint_url``)."""
        return self.base_url.removesuffix("/v1")

    def enqueue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        with self._lock:
            self._queue.extend(replies)

    def start(self) -> FakeProviderServer:
        httpd = _QuietHTTPServer(("127.0.0.1", 0), _handler_for(self))
        if self.ssl_context is not None:
            httpd.socket = self.ssl_context.wrap_socket(httpd.socket, server_side=True)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; pending delays end at once and their connections are dropped."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        return responder(request) if responder is not None else _default_reply(request)


def _handler_for(server: FakeProviderServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as a provider's servers answer: without it, every call after a kept connection's first
        # waited about 40 ms for its body (Nagle's algorithm against the client's delayed acknowledgement).
        disable_nagle_algorithm = True
        timeout = 30  # idle keep-alive connections end on their own

        def do_POST(self) -> None:  # noqa: N802 (stdlib naming)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            request = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                                      body, parsed)
            try:
                reply = server._next_reply(request)
            except Exception as exc:  # a broken responder must show up in the test, not hang it
                reply = Reply(599, {"error": {"message": f"fake responder failed: {exc!r}"}})
            if reply.delay_s > 0 and server._stopping.wait(reply.delay_s):
                self.close_connection = True
                return
            if reply.reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            payload = reply.encoded_body()
            try:
                self.send_response(reply.status)
                headers = {"Content-Type": "application/json", **reply.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if reply.trickle_s > 0:
                    step = max(1, len(payload) // 20)
                    for start in range(0, len(payload), step):
                        self.wfile.write(payload[start:start + step])
                        self.wfile.flush()
                        if server._stopping.wait(reply.trickle_s / 20):
                            break
                else:
                    self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
            """Silence per-request logging."""

    return Handler
