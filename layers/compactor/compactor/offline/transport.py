"""The ``builtin`` transport: offline, deterministic offers that cost nothing (docs/behaviour.md#catalog-and-transports).

``builtin-extractive-summarizer`` answers chat calls (JSON mode or the legacy seal) with
:mod:`.summarizer`, within the request's ``max_string_bytes`` / ``max_total_string_bytes`` and keeping
its ``keep_names`` (JSON mode), or within ``max_tokens``; ``builtin-rules-decider`` answers native
decisions with :mod:`.decider`. Usage is estimated as ``ceil(bytes / 4)`` tokens each way and the
reported cost is 0. Any other model, or the wrong call for the model, is a ``bad_request``.
"""

from __future__ import annotations

import math
from typing import Any

from compactor.jsonutil import ascii_wire_size, dense_size
from compactor.providers.base import (
    BAD_REQUEST, ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError,
)
from compactor.offline.decider import DECIDER_MODEL, decide
from compactor.offline.summarizer import (
    BYTES_PER_TOKEN, DEFAULT_ITEM_BUDGET, DEFAULT_SEAL_MAX_TOKENS, SUMMARIZER_MODEL,
    summarize_conversation, summarize_json_request,
)
from compactor.chat import content_text

BUILTIN_MODELS = (DECIDER_MODEL, SUMMARIZER_MODEL)


def estimated_tokens(size_bytes: int) -> int:
    """Token estimate used for the built-in offers: one token per 4 bytes, rounded up."""
    return math.ceil(size_bytes / BYTES_PER_TOKEN)


def _require_model(offer: Offer, expected: str, call: str) -> None:
    if offer.model == expected:
        return
    if offer.model in BUILTIN_MODELS:
        raise ProviderError(BAD_REQUEST, f"builtin model {offer.model!r} does not answer {call} calls")
    raise ProviderError(BAD_REQUEST, f"unknown builtin model {offer.model!r}")


def _last_content(messages: list[dict[str, Any]], role: str) -> str | None:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == role:
            return content_text(message.get("content"))
    return None


def _messages_bytes(messages: list[dict[str, Any]]) -> int:
    return sum(len(content_text(message.get("content")).encode("utf-8")) for message in messages
               if isinstance(message, dict))


class BuiltinTransport:
    """Transport for offers whose ``transport`` is ``builtin``; runs the algorithms in-process."""

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        """Summarize: JSON mode maps ids to item summaries; plain mode seals the conversation."""
        _require_model(offer, SUMMARIZER_MODEL, "chat")
        user_content = _last_content(request.messages, "user")
        if user_content is None:
            raise ProviderError(BAD_REQUEST, "the summarizer needs a user message")
        max_tokens = request.max_tokens
        if request.json_mode:
            # The byte limits and the names to keep arrive as data (the llm node's options); the
            # prompt, which states them in words for models, is not parsed.
            budget = request.max_string_bytes or DEFAULT_ITEM_BUDGET
            max_output_bytes = max_tokens * BYTES_PER_TOKEN if max_tokens else None
            try:
                text = summarize_json_request(user_content, budget, max_output_bytes, request.max_total_string_bytes,
                                              frozenset(request.keep_names))
            except ValueError as exc:  # includes StrictJSONError
                raise ProviderError(BAD_REQUEST, f"user content is not a JSON object of items: {exc}") from exc
        else:
            limit = (max_tokens or DEFAULT_SEAL_MAX_TOKENS) * BYTES_PER_TOKEN
            text = summarize_conversation(user_content, limit)
        tokens_in = estimated_tokens(_messages_bytes(request.messages))
        tokens_out = estimated_tokens(len(text.encode("utf-8")))
        return ChatResponse(
            text=text, finish_reason="stop", served_model_id=offer.model,
            tokens_in=tokens_in, tokens_out=tokens_out, tokens_total=tokens_in + tokens_out,
            cost_reported=0.0,
        )

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        """Answer every question with the rules decider."""
        _require_model(offer, DECIDER_MODEL, "decision")
        if not isinstance(request.questions, dict):
            raise ProviderError(BAD_REQUEST, "questions must be an object")
        try:
            answers = decide(request.state, request.questions)
            payload_bytes = ascii_wire_size({"state": request.state, "questions": request.questions})
        except ValueError as exc:  # an unsupported question type, or a non-finite number in the payload
            raise ProviderError(BAD_REQUEST, str(exc)) from exc
        tokens_in = estimated_tokens(payload_bytes)
        tokens_out = estimated_tokens(dense_size(answers))
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out,
                 "total_tokens": tokens_in + tokens_out, "cost": 0}
        return DecisionResponse(
            model=offer.model, answers=answers, usage=usage,
            tokens_in=tokens_in, tokens_out=tokens_out, tokens_total=tokens_in + tokens_out,
            cost_reported=0.0,
        )
