"""The ``bedrock`` transport (docs/providers.md): the Converse API through boto3, signed with the
function's role. Summaries are chat; decisions take the same prompt-and-validate path as
``chat-decisions``; usage comes from the answer and cost from the catalog prices. A request's cacheable
prefix is followed by a ``cachePoint`` block for the models that take one
(:mod:`compactor.providers.prompt_cache`, :data:`CACHE_POINT_MODELS`). An offer's ``reasoning_effort`` turns
Claude's adaptive thinking on (``additionalModelRequestFields.thinking``, ``outputConfig.effort``), its
``reasoning_budget_tokens`` alone extended thinking, and the reasoning room is added to ``maxTokens``; a model's
refusal of that thinking says what to change in the catalog (docs/providers.md "Reasoning models").
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from compactor.jsonutil import NestedTooDeep, ensure_utf8_encodable, loads_within
from compactor.providers.base import (
    AUTH_ERROR, BAD_REQUEST, BAD_RESPONSE, CONTEXT_OVERFLOW, NETWORK_ERROR, RATE_LIMIT, TIMEOUT, UPSTREAM_ERROR,
    ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError,
)
from compactor.providers.chat_decisions import decide_by_chat
from compactor.providers.http import CONTEXT_OVERFLOW_WORDS, parse_retry_after, safe_message
from compactor.providers.openai import CHAT_RESPONSE_MAX_BYTES, count
from compactor.providers.prompt_cache import cache_split, written_first
from compactor.providers.reasoning import claude_thinking, output_limit, thinking_refusal
from compactor.providers.turns import to_turns
from compactor_aws import background

DEFAULT_MAX_TOKENS = 1024
CONNECT_TIMEOUT_S = 5
# Read timeouts come in a few steps, so a container keeps a few clients, not one per attempt's time.
READ_TIMEOUT_STEPS_S = (5, 10, 20, 40, 60, 120, 300, 900)
# Bedrock error codes in the router's error kinds (docs/providers.md).
_ERROR_KINDS = {
    "ThrottlingException": RATE_LIMIT,
    "ServiceQuotaExceededException": RATE_LIMIT,
    "TooManyRequestsException": RATE_LIMIT,
    "AccessDeniedException": AUTH_ERROR,
    "UnrecognizedClientException": AUTH_ERROR,
    "ExpiredTokenException": AUTH_ERROR,
    "InvalidSignatureException": AUTH_ERROR,
    "ValidationException": BAD_REQUEST,
    "ResourceNotFoundException": BAD_REQUEST,
    "ModelTimeoutException": TIMEOUT,
    "ModelNotReadyException": UPSTREAM_ERROR,
    "ModelErrorException": UPSTREAM_ERROR,
    "ServiceUnavailableException": UPSTREAM_ERROR,
    "InternalServerException": UPSTREAM_ERROR,
}
# Model ids (and inference profiles naming them) Bedrock caches prompts for: Amazon Nova, Claude 3.7 Sonnet,
# 3.5 Haiku and the Claude 4 generations on. Bedrock refuses a cachePoint for other models, so an offer
# of any other model sends one only with ``"prompt_cache": true`` (docs/providers.md "Prompt caching").
CACHE_POINT_MODELS = re.compile(r"amazon\.nova-|anthropic\.claude-(?:3-7-sonnet|3-5-haiku|(?:sonnet|opus|haiku)-\d)")
# The deadline (``time.monotonic()``) of the Converse call a thread runs, set by ``BedrockTransport.chat`` and carried
# to the call's thread with its context: the answer's body is read piece by piece and given up past it.
_CALL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("bedrock_call_deadline", default=None)
_BODY_PIECE = 64 * 1024
_FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                   "guardrail_intervened": "content_filter", "content_filtered": "content_filter",
                   "model_context_window_exceeded": "length", "malformed_tool_use": "tool_calls"}
# The content block of Claude's thinking in a Converse answer (its text, or ``redactedContent``): not the answer.
_REASONING = "reasoningContent"
# The stop reason of an answer Bedrock itself calls broken: no answer at all (bad_response, another offer may do).
_MALFORMED_OUTPUT = "malformed_model_output"


@lru_cache(maxsize=32)
def _bedrock_client(region: str | None, endpoint_url: str | None, read_timeout_s: int) -> Any:
    """A shared ``bedrock-runtime`` client (thread-safe); no SDK retries: the router decides."""
    from botocore.config import Config

    from compactor_aws import aws_session

    config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=read_timeout_s,
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    max_pool_connections=background.CALLS_IN_FLIGHT, user_agent_extra="compactor")
    client = aws_session.client("bedrock-runtime", region_name=region, endpoint_url=endpoint_url, config=config)
    # botocore reads a whole answer in the call's thread with a read timeout per socket read, so a body arriving a
    # few bytes at a time held the thread until its end (forever for an endless drip). Each call is sent here
    # instead, with the client's own HTTP session, and its body read within the call's deadline.
    client.meta.events.register("before-send.bedrock-runtime.Converse",
                                _send_within_deadline(client._endpoint.http_session))
    return client


def _send_within_deadline(http_session: Any) -> Callable[..., Any]:
    """A ``before-send`` handler: when the call's thread has a deadline (:data:`_CALL_DEADLINE`), send ``request``
    with ``http_session`` (as botocore would, its errors botocore's) and read the answer's body in pieces; a piece
    that arrives past the deadline ends the call with botocore's ``ReadTimeoutError`` and closes its connection
    (docs/providers.md "Abandoned calls"). Without a deadline, botocore sends as usual."""
    def send(request: Any, **_: Any) -> Any:
        deadline = _CALL_DEADLINE.get()
        if deadline is None:
            return None
        from botocore.awsrequest import AWSResponse

        request.stream_output = True  # the answer's head only: its body is read below
        response = http_session.send(request)
        answer = 200 <= response.status_code < 300
        body = _body_by(response.raw, deadline, request.url, answer=answer)
        if not answer:
            body = _readable_error_body(body)
        return AWSResponse(request.url, response.status_code, response.headers, _ReadBody(body))
    return send


_UNREADABLE_ERROR_BODY = b'{"message": "(error body nested too deep to read)"}'


def _readable_error_body(body: bytes) -> bytes:
    """An error answer's ``body``, or one holding only a message when ``body`` is JSON nested past the parser's
    recursion limit (``jsonutil.loads_within``): botocore's ``json.loads`` of it raises ``RecursionError`` (it expects
    ``ValueError``), and the
    error's code (``x-amzn-ErrorType``), status and ``Retry-After`` were lost with it (docs/providers.md "Errors").
    Error bodies are small: parsing one twice costs nothing worth counting."""
    try:
        loads_within(body)
    except NestedTooDeep:
        return _UNREADABLE_ERROR_BODY
    except ValueError:
        pass
    return body


class AnswerTooLarge(Exception):
    """A Converse answer (2xx) longer than :data:`ANSWER_MAX_BYTES`: ``bad_response``."""


# The most bytes of an answer read, as the HTTP transports' bound (``compactor.providers.openai``): a Converse answer
# is a model's reply, far shorter; a longer one (an endpoint ``base_url`` names that is not Bedrock's) was read whole.
ANSWER_MAX_BYTES = CHAT_RESPONSE_MAX_BYTES


def _body_by(raw: Any, deadline: float, url: str, *, answer: bool = True) -> bytes:
    """The whole body of the urllib3 response ``raw``, read as it arrives, unless a piece arrives past
    ``deadline``; a read that fails or is given up closes the connection (its answer half read, it is not reused).
    At most :data:`ANSWER_MAX_BYTES`: a longer ``answer`` raises :class:`AnswerTooLarge`, a longer error is read to
    the bound only (docs/providers.md "Errors")."""
    from botocore.exceptions import ReadTimeoutError
    from urllib3.exceptions import ReadTimeoutError as Urllib3ReadTimeout

    pieces: list[bytes] = []
    size = 0
    try:
        while piece := raw.read1(_BODY_PIECE):
            pieces.append(piece)
            size += len(piece)
            if time.monotonic() > deadline:
                raise ReadTimeoutError(endpoint_url=url, error="the answer was still arriving at the call's deadline")
            if size > ANSWER_MAX_BYTES:
                if answer:
                    raise AnswerTooLarge(f"Converse answer exceeds {ANSWER_MAX_BYTES} bytes")
                raw.close()  # the rest of the error is not read: its connection is not reused
                return b"".join(pieces)[:ANSWER_MAX_BYTES]
    except Urllib3ReadTimeout as exc:
        raw.close()
        raise ReadTimeoutError(endpoint_url=url, error=exc) from None
    except BaseException:
        raw.close()
        raise
    raw.release_conn()
    return b"".join(pieces)


class _ReadBody:
    """A body read already, as botocore's response reads its ``raw``."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self) -> Any:
        yield self._body


def converse_arguments(offer: Offer, request: ChatRequest) -> tuple[dict[str, Any], str | None]:
    """The Converse call's arguments for ``request`` (JSON mode: the system prompt asks for JSON) and the
    key of its marked prefix (``None``: no cache point)."""
    turns = to_turns(request.messages, json_mode=request.json_mode, cache_boundary=request.cache_boundary)
    messages: list[dict[str, Any]] = [{"role": role, "content": [{"text": text}]} for role, text in turns.turns]
    split = cache_split(offer, turns, default=CACHE_POINT_MODELS.search(offer.model) is not None)
    if split is not None:
        messages[split.index]["content"] = [{"text": split.head}, {"cachePoint": {"type": "default"}},
                                            *([{"text": split.tail}] if split.tail else [])]
    arguments: dict[str, Any] = {
        "modelId": offer.model,
        "messages": messages,
        "inferenceConfig": {"maxTokens": request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS},
    }
    thinking = claude_thinking(offer)
    if thinking:  # Claude's thinking, on top of the answer's output
        arguments["additionalModelRequestFields"] = {"thinking": thinking["thinking"]}
        if "output_config" in thinking:  # Converse's own field for Anthropic's output_config.effort
            arguments["outputConfig"] = {"effort": thinking["output_config"]["effort"]}
        arguments["inferenceConfig"]["maxTokens"] = output_limit(offer, arguments["inferenceConfig"]["maxTokens"])
    if turns.system:
        arguments["system"] = [{"text": turns.system}]
    return arguments, None if split is None else split.key


def parse_converse(output: dict[str, Any], *, default_model: str) -> ChatResponse:
    """A :class:`ChatResponse` from a Converse answer. Bedrock's ``inputTokens`` leaves out cache reads
    and writes, which are added back (and reported as read and written)."""
    message = (output.get("output") or {}).get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise ProviderError(BAD_RESPONSE, "Converse answer has no output.message.content")
    blocks = [block for block in message["content"] if isinstance(block, dict)]
    # botocore parsed the body: an escaped lone surrogate is no text (as compactor.jsonutil.strict_loads_utf8). The
    # reasoning is not read, and is not checked: a redacted one (``redactedContent``, encrypted) is bytes.
    try:
        ensure_utf8_encodable([block for block in blocks if _REASONING not in block])
    except ValueError as exc:
        raise ProviderError(BAD_RESPONSE, f"Converse answer {exc}") from None
    text = "".join(block["text"] for block in blocks if isinstance(block.get("text"), str))
    tool_calls = [block["toolUse"] for block in blocks if isinstance(block.get("toolUse"), dict)] or None
    # (looked for only in an answer without text: the others are answers, whatever they thought)
    thought = (not text or text.isspace()) and any(_REASONING in block for block in blocks)
    usage = output.get("usage") if isinstance(output.get("usage"), dict) else {}
    fresh, cache_read, cache_write, out = (count(usage.get(key)) for key in
                                           ("inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens",
                                            "outputTokens"))
    tokens_in = None if fresh is None else fresh + (cache_read or 0) + (cache_write or 0)
    stop = output.get("stopReason")
    if stop == _MALFORMED_OUTPUT:
        raise ProviderError(BAD_RESPONSE, "Converse answer stopped as malformed_model_output")
    return ChatResponse(
        text=text,
        finish_reason=_FINISH_REASONS.get(stop, stop) if isinstance(stop, str) else None,
        tool_calls=tool_calls,
        served_model_id=default_model,
        tokens_in=tokens_in,
        tokens_out=out,
        tokens_total=None if tokens_in is None or out is None else tokens_in + out,
        tokens_cached=cache_read,
        tokens_cache_written=cache_write,
        tokens_reasoning=out if thought else None,  # all the output was reasoning
    )


def provider_error(exc: Exception) -> ProviderError:
    """A botocore exception as a :class:`ProviderError` of the router's kinds."""
    from botocore.exceptions import (
        ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError, ParamValidationError,
        ReadTimeoutError,
    )

    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        code = str(error.get("Code") or "")
        metadata = exc.response.get("ResponseMetadata") or {}
        status = metadata.get("HTTPStatusCode")
        headers = metadata.get("HTTPHeaders") or {}  # botocore lower-cases the names
        message = f"{code}: {error.get('Message') or ''}"
        kind = _ERROR_KINDS.get(code)
        if kind is None:
            kind = RATE_LIMIT if status == 429 else AUTH_ERROR if status in (401, 403) \
                else BAD_REQUEST if isinstance(status, int) and 400 <= status < 500 else UPSTREAM_ERROR
        if kind == BAD_REQUEST and CONTEXT_OVERFLOW_WORDS.search(message):
            kind = CONTEXT_OVERFLOW
        # The wait the service asks for, as the HTTP transports read it (docs/reliability.md "Polite retries").
        return ProviderError(kind, safe_message(message), http_status=status,
                             retry_after_s=parse_retry_after(headers.get("retry-after")))
    # Nothing was sent without credentials or a connection (docs/behaviour.md "Cost rules"): no model call, no bill.
    if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)):
        return ProviderError(TIMEOUT, safe_message(f"{type(exc).__name__}: {exc}"),
                             sent=not isinstance(exc, ConnectTimeoutError))
    if isinstance(exc, NoCredentialsError):
        return ProviderError(AUTH_ERROR, "no AWS credentials for Bedrock (the function's role signs the calls)",
                             sent=False)
    if isinstance(exc, EndpointConnectionError):
        return ProviderError(NETWORK_ERROR, safe_message(f"{type(exc).__name__}: {exc}"), sent=False)
    if isinstance(exc, ParamValidationError):  # botocore's check of the request, before anything is sent
        return ProviderError(BAD_REQUEST, safe_message(f"{type(exc).__name__}: {exc}"), sent=False)
    return ProviderError(UPSTREAM_ERROR, safe_message(f"{type(exc).__name__}: {exc}"))


class BedrockTransport:
    """Chat and decision offers served through the Bedrock Converse API. Stateless (beside the prompt-cache
    gate of :func:`~compactor.providers.prompt_cache.written_first`).

    boto3 is synchronous: each call runs in one of the container's call threads
    (:func:`compactor_aws.background.in_thread`, as many as the client keeps connections: up to 64 calls of a
    container in flight at once, as over httpx) whose read timeout is the first step of
    ``READ_TIMEOUT_STEPS_S`` covering the attempt's time and whose answer is read within the attempt's time
    (:func:`_send_within_deadline`), so an abandoned call ends on its own soon after the router gave up on it."""

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        if timeout_s <= 0:
            raise ProviderError(TIMEOUT, "no time left for the call", sent=False)
        step = next((s for s in READ_TIMEOUT_STEPS_S if s >= timeout_s), READ_TIMEOUT_STEPS_S[-1])
        client = _bedrock_client(offer.region, offer.base_url, step)
        arguments, prefix = converse_arguments(offer, request)
        deadline = _CALL_DEADLINE.set(time.monotonic() + timeout_s)  # the call's thread reads it
        try:
            async with written_first(prefix):
                output = await background.in_thread(client.converse, **arguments)
        except RecursionError:  # botocore's parse of a 2xx body nested too deep (error bodies: _readable_error_body)
            raise ProviderError(BAD_RESPONSE, "Converse answer nested too deep to read") from None
        except AnswerTooLarge as exc:
            raise ProviderError(BAD_RESPONSE, str(exc)) from None
        except Exception as exc:
            raise thinking_refusal(offer, provider_error(exc)) from None
        finally:
            _CALL_DEADLINE.reset(deadline)
        return parse_converse(output, default_model=offer.model)

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        return await decide_by_chat(self.chat, offer, request, timeout_s)
