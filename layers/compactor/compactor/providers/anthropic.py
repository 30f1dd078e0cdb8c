"""The ``anthropic`` transport: the Anthropic Messages API (docs/providers.md).

``POST {base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``; the system prompt is a
top-level field, turns alternate (:mod:`compactor.providers.turns`), ``max_tokens`` is required. The
answer's text blocks are joined (thinking blocks are not the answer); ``stop_reason: max_tokens`` reads as
``finish_reason: length``. An offer's ``reasoning_effort`` turns adaptive thinking on (``thinking``,
``output_config.effort``), its ``reasoning_budget_tokens`` alone extended thinking, and the reasoning room is added
to ``max_tokens``; a model's refusal of that thinking says what to change in the catalog (docs/providers.md
"Reasoning models"). A
request's cacheable prefix ends in a text block marked ``cache_control: {"type": "ephemeral"}``
(:mod:`compactor.providers.prompt_cache`). Usage: ``input_tokens`` excludes cached input, so cache reads
and writes are added back (and reported as read and written). Decisions go through the same
prompt-and-validate path as ``chat-decisions``.
"""

from __future__ import annotations

from typing import Any

from compactor.jsonutil import StrictJSONError, strict_loads_utf8
from compactor.providers.base import (
    BAD_RESPONSE, ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError, bounded_model,
)
from compactor.providers.chat_decisions import decide_by_chat
from compactor.providers.http import post_json, reply_error, safe_message
from compactor.providers.keys import resolve_key
from compactor.providers.openai import CHAT_RESPONSE_MAX_BYTES, count, endpoint
from compactor.providers.prompt_cache import cache_split, written_first
from compactor.providers.reasoning import claude_thinking, output_limit, thinking_refusal
from compactor.providers.turns import to_turns

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024  # the API requires max_tokens; used when the request leaves it open
# Anthropic stop reasons in the finish_reason words the rest of Compactor reads.
_FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                   "refusal": "content_filter", "model_context_window_exceeded": "length"}
# The content blocks of extended thinking (docs/providers.md "Reasoning models"); their text is not the answer.
_THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def messages_body(offer: Offer, request: ChatRequest) -> tuple[dict[str, Any], str | None]:
    """The JSON body sent for ``request`` and the key of its marked prefix (``None``: no marker). JSON
    mode has no switch here: the system prompt asks for JSON."""
    turns = to_turns(request.messages, json_mode=request.json_mode, cache_boundary=request.cache_boundary)
    messages: list[dict[str, Any]] = [{"role": role, "content": text} for role, text in turns.turns]
    split = cache_split(offer, turns, default=True)
    if split is not None:
        messages[split.index]["content"] = [
            {"type": "text", "text": split.head, "cache_control": {"type": "ephemeral"}},
            *([{"type": "text", "text": split.tail}] if split.tail else [])]
    body: dict[str, Any] = {
        "model": offer.model,
        "max_tokens": request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    thinking = claude_thinking(offer)
    if thinking:  # Claude's thinking is output on top of the answer's
        body.update(thinking)
        body["max_tokens"] = output_limit(offer, body["max_tokens"])
    if turns.system:
        body["system"] = turns.system
    return body, None if split is None else split.key


def parse_message(body: bytes, *, default_model: str) -> ChatResponse:
    """A :class:`ChatResponse` from a Messages API answer; malformed bodies raise ``bad_response``."""
    try:
        payload = strict_loads_utf8(body)
    except StrictJSONError as exc:
        raise ProviderError(BAD_RESPONSE, f"response is not valid JSON ({exc})") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("content"), list):
        raise ProviderError(BAD_RESPONSE, "response has no content blocks")
    blocks = [block for block in payload["content"] if isinstance(block, dict)]
    text = "".join(block["text"] for block in blocks
                   if block.get("type") == "text" and isinstance(block.get("text"), str))
    tool_calls = [block for block in blocks if block.get("type") == "tool_use"] or None
    # (looked for only in an answer without text: the others are answers, whatever they thought)
    thought = (not text or text.isspace()) and any(block.get("type") in _THINKING_BLOCKS for block in blocks)
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    fresh, cache_read, cache_write = (count(usage.get(key)) for key in
                                      ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    out = count(usage.get("output_tokens"))
    tokens_in = None if fresh is None else fresh + (cache_read or 0) + (cache_write or 0)
    stop = payload.get("stop_reason")
    model = payload.get("model")
    return ChatResponse(
        text=text,
        finish_reason=_FINISH_REASONS.get(stop, stop) if isinstance(stop, str) else None,
        tool_calls=tool_calls,
        served_model_id=bounded_model(model) if isinstance(model, str) and model else default_model,
        tokens_in=tokens_in,
        tokens_out=out,
        tokens_total=None if tokens_in is None or out is None else tokens_in + out,
        tokens_cached=cache_read,
        tokens_cache_written=cache_write,
        tokens_reasoning=out if thought else None,  # all the output was thinking
    )


class AnthropicTransport:
    """Chat and decision offers reached over the Anthropic Messages API. Stateless (beside the prompt-cache
    gate of :func:`~compactor.providers.prompt_cache.written_first`)."""

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        key = await resolve_key(offer)
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
        body, prefix = messages_body(offer, request)
        async with written_first(prefix):  # an error status has written nothing: the next call writes
            reply = await post_json(endpoint(offer, "v1/messages"), body, headers=headers, timeout_s=timeout_s,
                                    max_body_bytes=CHAT_RESPONSE_MAX_BYTES, secrets=(key,))
            error = reply_error(reply, (key,))
            if error is not None:
                raise thinking_refusal(offer, error)
        try:
            return parse_message(reply.body, default_model=offer.model)
        except ProviderError as exc:
            raise ProviderError(exc.kind, safe_message(exc.message, (key,)), http_status=reply.status) from None

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        return await decide_by_chat(self.chat, offer, request, timeout_s)
