"""The ``openai`` transport: OpenAI Chat Completions (docs/behaviour.md#catalog-and-transports).

``POST {base_url}/chat/completions`` with ``model``, ``messages``, ``max_tokens`` and, for JSON nodes,
``response_format: {"type": "json_object"}``. A model that refuses ``max_tokens`` for ``max_completion_tokens``
(OpenAI's reasoning models: the o-series, gpt-5) is sent the latter at once, and from then on, with room for its
reasoning; an offer stating ``reasoning_effort`` or ``reasoning_budget_tokens`` is sent it from the first call
(docs/providers.md "Reasoning models"). :func:`complete_chat` is also what the ``chat-decisions`` transport sends
its prompts through.
"""

from __future__ import annotations

import time
from typing import Any

from compactor.chat import content_text
from compactor.cost import reported
from compactor.jsonutil import StrictJSONError, strict_loads_utf8
from compactor.providers.base import (
    BAD_REQUEST, BAD_RESPONSE, REFUSED, ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer,
    ProviderError, bounded_model, sane_tokens,
)
from compactor.providers.http import (
    error_detail, error_object, kind_for_status, post_json, reply_error, safe_message, status_of_error_object,
)
from compactor.providers.keys import resolve_key
from compactor.providers.reasoning import (
    found_to_reason, note_reasoning_answer, note_reasoning_model, output_limit, refused_max_tokens,
)
from compactor.providers.turns import JSON_INSTRUCTION

CHAT_RESPONSE_MAX_BYTES = 8 * 1024 * 1024


def endpoint(offer: Offer, suffix: str) -> str:
    """``{base_url}/{suffix}``, a query ``base_url`` carries kept after it (Azure OpenAI's ``?api-version=…``, a
    gateway's parameters); an offer without ``base_url`` is a configuration error."""
    if not offer.base_url:
        raise ProviderError(BAD_REQUEST, f"offer {offer.id} has no base_url", sent=False)
    root, mark, query = offer.base_url.partition("?")
    return f"{root.rstrip('/')}/{suffix}{mark}{query}"


# Azure OpenAI's hosts (Azure OpenAI resources, AI Services and AI Foundry resources), and the path of its
# deployment-per-URL API, which a gateway in front of it (API Management, a private endpoint's own name) keeps.
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")
_AZURE_DEPLOYMENTS_PATH = "/openai/deployments/"


def takes_api_key_header(base_url: str) -> bool:
    """Whether ``base_url`` is Azure OpenAI's, whose API keys go in an ``api-key`` header: its deployments API
    (``/openai/deployments/{name}?api-version=…``) takes ``Authorization: Bearer`` only for Microsoft Entra
    tokens, and refuses a key sent so with a 401; its v1 API takes ``api-key`` too."""
    root = base_url.partition("?")[0]
    host = root.partition("://")[2].partition("/")[0].rpartition("@")[2].partition(":")[0].lower().rstrip(".")
    return host.endswith(_AZURE_HOSTS) or _AZURE_DEPLOYMENTS_PATH in f"{root.rstrip('/')}/"


def _entra_token(key: str) -> bool:
    """Whether ``key`` is a Microsoft Entra access token (a JWT: three dot-separated parts, a JSON header first)
    rather than an API key: Azure takes it as ``Authorization: Bearer``, as the Azure OpenAI SDKs send it."""
    return key.startswith("eyJ") and key.count(".") == 2


async def key_headers(offer: Offer) -> tuple[dict[str, str], str | None]:
    """The header carrying the offer's key (:func:`compactor.providers.keys.resolve_key`) and the key:
    ``Authorization: Bearer <key>``, or ``api-key: <key>`` for an API key to Azure OpenAI
    (:func:`takes_api_key_header`); ``({}, None)`` when the offer needs no key."""
    key = await resolve_key(offer)
    if not key:
        return {}, None
    if offer.base_url and takes_api_key_header(offer.base_url) and not _entra_token(key):
        return {"api-key": key}, key
    return {"Authorization": f"Bearer {key}"}, key


def _mentions_json(messages: list[dict[str, Any]]) -> bool:
    """Whether a message's text says "json" (any case), which OpenAI requires of a JSON-mode request."""
    return any("json" in content_text(message.get("content")).lower() for message in messages
               if isinstance(message, dict))


def chat_body(offer: Offer, request: ChatRequest) -> dict[str, Any]:
    """The JSON body sent for ``request``: the output limit as ``max_tokens``, or as ``max_completion_tokens``
    for a reasoning model (an offer stating ``reasoning_effort`` or ``reasoning_budget_tokens``, or a model found
    to want it), with room for its reasoning added (:mod:`compactor.providers.reasoning`), and the offer's
    ``reasoning_effort``. A JSON-mode request none of whose messages says "json" starts with a system
    message asking for one JSON object (:data:`~compactor.providers.turns.JSON_INSTRUCTION`, what the ``anthropic``
    and ``bedrock`` transports always add): OpenAI refuses ``response_format: json_object`` otherwise (a 400
    "'messages' must contain the word 'json'"), so an llm node whose prompt did not say it failed every call."""
    messages = request.messages
    if request.json_mode and not _mentions_json(messages):
        messages = [{"role": "system", "content": JSON_INSTRUCTION}, *messages]
    body: dict[str, Any] = {"model": offer.model, "messages": messages}
    if offer.reasoning_effort is not None or offer.reasoning_budget_tokens is not None:
        # a reasoning offer (docs/providers.md "Reasoning models"): the limit counts reasoning and answer
        if request.max_tokens is not None:
            body["max_completion_tokens"] = output_limit(offer, request.max_tokens)
        if offer.reasoning_effort is not None:
            body["reasoning_effort"] = offer.reasoning_effort
    elif request.max_tokens is not None:
        # a model found to reason gets room at the default effort's (reasoning_room): as max_completion_tokens
        # when it refused max_tokens, else (its answer reported reasoning) in the max_tokens it took
        limit = output_limit(offer, request.max_tokens) if found_to_reason(offer) else request.max_tokens
        body["max_completion_tokens" if refused_max_tokens(offer) else "max_tokens"] = limit
    if request.json_mode:
        body["response_format"] = {"type": "json_object"}
    return body


def refuses_max_tokens(status: int, body: bytes) -> bool:
    """Whether an answer is OpenAI's refusal of ``max_tokens`` by a model that takes only
    ``max_completion_tokens`` (400, ``error.param`` ``max_tokens``, the message naming the other)."""
    error = error_object(body, b"max_completion_tokens") if status == 400 else None
    return error is not None and error.get("param") == "max_tokens" \
        and "max_completion_tokens" in str(error.get("message"))


async def complete_chat(offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
    """Send one chat completion to ``offer`` and parse the answer (errors as :class:`ProviderError`). A refusal
    of ``max_tokens`` (:func:`refuses_max_tokens`, not billed) is sent again at once, within ``timeout_s``,
    with ``max_completion_tokens``, as every later call to that model."""
    url = endpoint(offer, "chat/completions")
    headers, key = await key_headers(offer)
    started = time.monotonic()
    body = chat_body(offer, request)
    reply = await post_json(url, body, headers=headers, timeout_s=timeout_s,
                            max_body_bytes=CHAT_RESPONSE_MAX_BYTES, secrets=(key,))
    # (each call that sent max_tokens is sent again: calls in flight when the first refusal came sent it too)
    if "max_tokens" in body and refuses_max_tokens(reply.status, reply.body):
        note_reasoning_model(offer)  # for every later call to it, and the router's context check
        reply = await post_json(url, chat_body(offer, request), headers=headers,
                                timeout_s=timeout_s - (time.monotonic() - started),
                                max_body_bytes=CHAT_RESPONSE_MAX_BYTES, secrets=(key,))
    error = reply_error(reply, (key,))
    if error is not None:
        raise error
    try:
        response = parse_chat_completion(reply.body, default_model=offer.model)
    except ProviderError as exc:
        raise ProviderError(exc.kind, safe_message(exc.message, (key,)), http_status=reply.status,
                            cost_reported=exc.cost_reported, retry_after_s=reply.retry_after_s) from None
    if response.reasoned and not found_to_reason(offer) \
            and offer.reasoning_effort is None and offer.reasoning_budget_tokens is None:
        note_reasoning_answer(offer)  # it reasons within max_tokens: room from its next call (reasoning_room)
    return response


count = sane_tokens
_usd = reported


def _content_text(content: Any) -> str | None:
    """Message content as text: a string, or the text parts of a content-part list."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, dict)]
        return "".join(part for part in parts if isinstance(part, str))
    raise ProviderError(BAD_RESPONSE, "message content is neither text nor content parts")


def _tool_calls(value: Any) -> list[dict[str, Any]] | None:
    calls = [call for call in value if isinstance(call, dict)] if isinstance(value, list) else []
    return calls or None


def _finish_reason(choice: dict[str, Any], message: dict[str, Any]) -> str | None:
    """The choice's ``finish_reason``, or :data:`REFUSED` when the message carries a ``refusal`` (OpenAI's refusal,
    sent with ``content: null`` and ``finish_reason: "stop"``): the model declined, which is no answer, as
    Anthropic's ``stop_reason: "refusal"`` (docs/providers.md "``protocol`` and ``transport`` values")."""
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return REFUSED
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) else None


def parse_chat_completion(body: bytes, *, default_model: str) -> ChatResponse:
    """A :class:`ChatResponse` from a Chat Completions body; malformed bodies raise ``bad_response``."""
    try:
        payload = strict_loads_utf8(body)
    except StrictJSONError as exc:
        raise ProviderError(BAD_RESPONSE, f"response is not valid JSON ({exc})") from exc
    if not isinstance(payload, dict):
        raise ProviderError(BAD_RESPONSE, "response is not a JSON object")
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        problem = "response has no choices[0].message"
        said = status_of_error_object(payload)
        if said is not None:  # a gateway's failure sent as a 200 (OpenRouter, once the model has begun)
            raise ProviderError(kind_for_status(said, error_detail(body), body),
                                f"answer carries error {said}: {error_detail(body)}",
                                cost_reported=reported(usage.get("cost")))
        if "error" in payload:
            problem += f"; provider error: {error_detail(body)}"
        raise ProviderError(BAD_RESPONSE, problem, cost_reported=reported(usage.get("cost")))
    choice = choices[0]
    message = choice["message"]
    details = usage.get("prompt_tokens_details")
    model = payload.get("model")
    finish_reason = _finish_reason(choice, message)
    details_out = usage.get("completion_tokens_details")
    reasoning_tokens = count(details_out.get("reasoning_tokens")) if isinstance(details_out, dict) else None
    return ChatResponse(
        text=_content_text(message.get("content")),
        finish_reason=finish_reason,
        tool_calls=_tool_calls(message.get("tool_calls")),
        served_model_id=bounded_model(model) if isinstance(model, str) and model else default_model,
        tokens_in=count(usage.get("prompt_tokens")),
        tokens_out=count(usage.get("completion_tokens")),
        tokens_total=count(usage.get("total_tokens")),
        tokens_cached=count(details.get("cached_tokens")) if isinstance(details, dict) else None,
        # reasoning tokens are read where they may say something: an answer stopped at its limit (spent_on_reasoning)
        tokens_reasoning=reasoning_tokens if finish_reason == "length" else None,
        reasoned=bool(reasoning_tokens) or _reasoning_text(message),
        cost_reported=reported(usage.get("cost")),
    )


def _reasoning_text(message: dict[str, Any]) -> bool:
    """Whether the message carries the model's reasoning as text: ``reasoning_content`` (vLLM, llama.cpp,
    DeepSeek) or ``reasoning`` (OpenRouter, Ollama), a non-blank string."""
    return any(isinstance(message.get(name), str) and bool(message[name].strip())
               for name in ("reasoning_content", "reasoning"))


class OpenAITransport:
    """Chat offers reached over the OpenAI Chat Completions wire format. Stateless."""

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        return await complete_chat(offer, request, timeout_s)

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        raise ProviderError(BAD_REQUEST, f"offer {offer.id} speaks chat, not decisions", sent=False)
