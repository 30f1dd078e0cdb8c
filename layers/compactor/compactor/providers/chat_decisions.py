"""The ``chat-decisions`` transport: a chat model answers native decision questions.

Compactor sends its own prompt over the OpenAI wire format in JSON mode: a system prompt that
explains the question types and the exact answer shape, and a user message holding the state and
questions as JSON, where a string of the state that holds a JSON array or object (a fragment's evidence, the
JSON of its messages) is shown as that JSON, not quoted (:func:`payload_text`). The reply must be strict JSON
``{"answers": {...}}``; it is wrapped as ``{"model": offer.model, "answers": …, "usage": …}`` and validated like a
native decision
(docs/providers.md). :func:`decide_by_chat` is the same path for every chat transport. Anything else is ``bad_response``
(still carrying the billed cost); a rejected reply, ``bad_response`` or ``invalid_decision``, also carries the chat
answer, whose usage prices the attempt when the provider reports no cost (docs/behaviour.md "Cost rules").
The request's ``cache_prefix`` becomes the chat request's cache boundary: the end of those state members
in the user message, after which nothing is shared between related requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from compactor.jsonutil import StrictJSONError, dense_dumps, holds_json_container, strict_loads_utf8
from compactor.providers.base import (
    BAD_REQUEST, BAD_RESPONSE, REASONING_EXHAUSTED, CacheBoundary, ChatRequest, ChatResponse, DecisionRequest,
    DecisionResponse, Offer, ProviderError, spent_on_reasoning, unfinished,
)
from compactor.providers.native_decisions import checked_decision, checked_payload
from compactor.providers.openai import complete_chat

# Output room: a fixed allowance plus a little per question, within the usual generation cap.
_BASE_MAX_TOKENS = 256
_MAX_TOKENS_PER_QUESTION = 128
_MAX_TOKENS_CAP = 4096

SYSTEM_PROMPT = """You answer decision questions about a state. The user message is a JSON object \
{"state": ..., "questions": {"<name>": {"type": ..., "instructions": ..., "criteria": ...}}}.
A string of the state that holds a JSON array or object is shown as that JSON, not quoted. \
Read the state, follow each question's instructions, and judge by its criteria.

Question types and the answer each needs:
- "choice": criteria map option names to descriptions. Answer \
{"type": "choice", "choice": "<exactly one option name>", "confidence": <number 0..1>}.
- "score": criteria is an ordered list of levels, index 0 first. Answer \
{"type": "score", "score": <number from 0 to number of levels - 1>, "confidence": <number 0..1>}.
- "noul": a yes/no judgement, criteria (if present) describe "true" and "false". Answer \
{"type": "noul", "noul": <probability 0..1 that the answer is true>}.

Reply with one JSON object and nothing else: {"answers": {"<name>": <answer>, ...}} with exactly one \
answer for every question name and no other keys. Never invent option names."""


def decision_messages(payload: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages that ask for ``payload`` (``{state, questions}``)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": payload_text(payload)},
    ]


def payload_text(payload: dict[str, Any]) -> str:
    """The dense JSON of ``payload`` with each string of its ``state`` that holds a JSON array or object shown as
    that JSON text, as it is (:func:`compactor.jsonutil.holds_json_container`: parsed strictly to check, to a fixed
    depth). A fragment's evidence is the JSON of its messages: quoted, the model read each of its ``"`` as ``\\"``
    and the wire carried ``\\\\\\"`` (docs/performance.md "Model input"). An excerpt, which is no JSON, and every
    other value read as they do in the native payload, whose evidence stays a string; the same state makes the
    same text (the shared prefix of a request's batches, :func:`cache_boundary`)."""
    return "{" + ",".join(dense_dumps(key) + ":" + (_embedded(value) if key == "state" else dense_dumps(value))
                          for key, value in payload.items()) + "}"


def _embedded(value: Any) -> str:
    """Dense JSON of ``value``, its strings that hold a JSON array or object at any depth spliced in as that JSON."""
    if isinstance(value, str):
        return value if holds_json_container(value) else dense_dumps(value)
    if isinstance(value, dict) and all(type(key) is str for key in value):
        return "{" + ",".join(dense_dumps(key) + ":" + _embedded(item) for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_embedded(item) for item in value) + "]"
    return dense_dumps(value)


def cache_boundary(messages: list[dict[str, str]], payload: dict[str, Any],
                   cache_prefix: tuple[str, ...]) -> CacheBoundary | None:
    """Where the state's leading members named in ``cache_prefix`` end in the user message of
    :func:`decision_messages` (``None`` when the state does not start with any of them)."""
    state = payload["state"]
    if not cache_prefix or not isinstance(state, dict):
        return None
    shared: dict[str, Any] = {}
    for name, value in state.items():
        if name not in cache_prefix:
            break
        shared[name] = value
    if not shared:
        return None
    head = payload_text({"state": shared})[:-2]  # the text up to the last shared member's value
    text = messages[1]["content"]
    return CacheBoundary(1, len(head)) if text.startswith(head) else None


def _reply_answers(chat: ChatResponse) -> Any:
    """The ``answers`` of a complete JSON reply, else ``bad_response``; ``reasoning_exhausted`` (carrying the
    answer, whose usage prices it) when a reasoning model spent its output budget on reasoning."""
    unfinished_by = unfinished(chat)
    if spent_on_reasoning(chat):
        raise ProviderError(REASONING_EXHAUSTED, f"decision reply {unfinished_by}", cost_reported=chat.cost_reported,
                            answered=chat)
    if unfinished_by is not None:
        problem = f"decision reply {unfinished_by}"
    elif not chat.text:
        problem = "decision reply is empty"
    else:
        try:
            reply = strict_loads_utf8(chat.text)
        except StrictJSONError as exc:
            problem = f"decision reply is not strict JSON ({exc})"
        else:
            if isinstance(reply, dict) and set(reply) == {"answers"}:
                return reply["answers"]
            problem = 'decision reply is not {"answers": {...}}'
    raise ProviderError(BAD_RESPONSE, problem, cost_reported=chat.cost_reported, answered=chat)


def _decision_usage(chat: ChatResponse) -> dict[str, Any]:
    usage: dict[str, Any] = {
        key: value
        for key, value in (("input_tokens", chat.tokens_in), ("output_tokens", chat.tokens_out),
                           ("total_tokens", chat.tokens_total))
        if value is not None
    }
    if chat.cost_reported is not None:
        usage["cost"] = chat.cost_reported
    return usage


SendChat = Callable[[Offer, ChatRequest, float], Awaitable[ChatResponse]]


async def decide_by_chat(send: SendChat, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
    """Ask ``request`` through a chat call (``send``: any transport's ``chat``) and validate the reply.

    The path every chat model's decisions take (``chat-decisions``, ``anthropic``, ``bedrock``)."""
    payload = checked_payload(offer, request)
    max_tokens = min(_MAX_TOKENS_CAP, _BASE_MAX_TOKENS + _MAX_TOKENS_PER_QUESTION * len(request.questions))
    messages = decision_messages(payload)
    chat = await send(offer, ChatRequest(messages, max_tokens=max_tokens, json_mode=True,
                                         cache_boundary=cache_boundary(messages, payload, request.cache_prefix)),
                      timeout_s)
    answer = {"model": offer.model, "answers": _reply_answers(chat), "usage": _decision_usage(chat)}
    try:
        decision = checked_decision(request, answer, model_family=offer.family)
    except ProviderError as exc:  # an answer that breaks the rules was still billed: its usage prices it
        exc.answered = chat
        raise
    decision.tokens_cached, decision.tokens_cache_written = chat.tokens_cached, chat.tokens_cache_written
    return decision


class ChatDecisionsTransport:
    """Decision offers served by an OpenAI-compatible chat model through Compactor's decision prompt. Stateless."""

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        return await decide_by_chat(complete_chat, offer, request, timeout_s)

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        raise ProviderError(BAD_REQUEST, f"offer {offer.id} answers decisions, not chat", sent=False)
