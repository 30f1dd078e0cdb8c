"""The ``decisions`` transport: native decision endpoints (docs/behaviour.md#catalog-and-transports, docs/behaviour.md#native-decisions).

``POST {base_url}/decisions`` with exactly ``{"model", "state", "questions"}``; the answer
``{"model", "answers", "usage"?}`` must be at most 131 072 bytes, free of duplicate keys and valid
for the questions, else ``bad_response``.
"""

from __future__ import annotations

from typing import Any

from compactor.cost import reported
from compactor.decision_validation import DECISION_RESPONSE_MAX_BYTES, DecisionValidationError, validate_answers, validate_payload
from compactor.jsonutil import StrictJSONError, strict_loads_utf8
from compactor.providers.base import (
    BAD_REQUEST, BAD_RESPONSE, INVALID_DECISION, ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer,
    ProviderError, bounded_model, sane_tokens,
)
from compactor.providers.http import bearer_headers, post_json, reply_error
from compactor.providers.openai import endpoint


def reported_cost(usage: Any) -> float | None:
    """``usage.cost`` when it is a sane number (what the provider billed, see ``compactor.cost.reported``), else None."""
    return reported(usage.get("cost")) if isinstance(usage, dict) else None


def sane_usage(usage: Any) -> dict[str, Any] | None:
    """The usage fields worth keeping: token counts and cost within sane bounds; junk is dropped, so a
    valid answer is never refused for its usage (docs/reliability.md)."""
    if not isinstance(usage, dict):
        return None
    kept: dict[str, Any] = {key: usage[key] for key in ("input_tokens", "output_tokens", "total_tokens")
                            if sane_tokens(usage.get(key)) is not None}
    if reported(usage.get("cost")) is not None:
        kept["cost"] = usage["cost"]
    return kept or None


def checked_decision(request: DecisionRequest, answer: Any, *, model_family: str,
                     http_status: int | None = None) -> DecisionResponse:
    """Validate a provider's decision object and turn it into a :class:`DecisionResponse`.

    Usage junk is dropped (:func:`sane_usage`); invalid answers raise ``invalid_decision`` that still
    carries the billed cost, if any, and the usage that prices it otherwise."""
    usage = sane_usage(answer.get("usage")) if isinstance(answer, dict) else None
    if isinstance(answer, dict):
        answer = {**answer, "usage": usage}
        if "model" in answer:
            answer["model"] = bounded_model(answer["model"])
    try:
        validate_answers(request.questions, answer, model_family=model_family)
    except DecisionValidationError as exc:
        # No decision object at all is the provider's fault (another offer may do better); answers that
        # break the rules are the model's decision: invalid_decision, not retried elsewhere.
        malformed = not isinstance(answer, dict) or not isinstance(answer.get("answers"), dict) \
            or not isinstance(answer.get("model"), str)
        raise ProviderError(BAD_RESPONSE if malformed else INVALID_DECISION, f"invalid decision: {exc.message}",
                            http_status=http_status, cost_reported=reported_cost(usage),
                            answered=_usage_only(usage)) from exc
    return DecisionResponse(
        model=answer["model"],
        answers=answer["answers"],
        usage=usage,
        tokens_in=(usage or {}).get("input_tokens"),
        tokens_out=(usage or {}).get("output_tokens"),
        tokens_total=(usage or {}).get("total_tokens"),
        cost_reported=reported_cost(usage),
    )


def _usage_only(usage: dict[str, Any] | None) -> DecisionResponse | None:
    """A rejected answer's usage, which prices the attempt when the provider reports no cost (the router's
    ``compute_cost``, docs/behaviour.md "Cost rules"); None without token counts."""
    if not usage or "input_tokens" not in usage or "output_tokens" not in usage:
        return None
    return DecisionResponse(model="", answers={}, usage=usage, tokens_in=usage["input_tokens"],
                            tokens_out=usage["output_tokens"], tokens_total=usage.get("total_tokens"))


def checked_payload(offer: Offer, request: DecisionRequest) -> dict[str, Any]:
    """The ``{state, questions}`` payload, refused (``bad_request``) before any spend when invalid. A request
    that carries its ``wire_bytes`` was checked by the flow runtime that measured them: not again
    (docs/performance.md)."""
    payload = {"state": request.state, "questions": request.questions}
    if request.wire_bytes is not None:
        return payload
    try:
        validate_payload(payload)
    except DecisionValidationError as exc:
        raise ProviderError(BAD_REQUEST, f"{exc.message} (offer {offer.id})", sent=False) from exc
    return payload


class DecisionsTransport:
    """Decision offers reached over the native decisions wire format. Stateless."""

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        payload = checked_payload(offer, request)
        url = endpoint(offer, "decisions")
        headers, key = await bearer_headers(offer)
        reply = await post_json(url, {"model": offer.model, **payload}, headers=headers, timeout_s=timeout_s,
                                max_body_bytes=DECISION_RESPONSE_MAX_BYTES, secrets=(key,))
        error = reply_error(reply, (key,))
        if error is not None:
            raise error
        try:
            answer = strict_loads_utf8(reply.body)
        except StrictJSONError as exc:
            raise ProviderError(BAD_RESPONSE, f"decision response is not strict JSON ({exc})",
                                http_status=reply.status) from exc
        return checked_decision(request, answer, model_family=offer.family, http_status=reply.status)

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        raise ProviderError(BAD_REQUEST, f"offer {offer.id} answers decisions, not chat", sent=False)
