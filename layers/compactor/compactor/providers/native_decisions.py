"""The ``decisions`` transport: native decision endpoints (docs/behaviour.md#catalog-and-transports, docs/behaviour.md#native-decisions).

``POST {base_url}/decisions`` with exactly ``{"model", "state", "questions"}``; the answer
``{"model", "answers", "usage"?}`` must be at most 131 072 bytes, free of duplicate keys and valid
for the questions, else ``bad_response``.
"""

from __future__ import annotations

from typing import Any

from compactor.cost import reported
from compactor.decision_validation import DECISION_RESPONSE_MAX_BYTES, DecisionValidationError, validate_answers, validate_payload
from compactor.jsonutil import StrictJSONError, strict_loads
from compactor.providers.base import (
    BAD_REQUEST, BAD_RESPONSE, ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError,
)
from compactor.providers.http import bearer_headers, error_for_status, post_json
from compactor.providers.openai import endpoint


def reported_cost(usage: Any) -> float | None:
    """``usage.cost`` when it is a finite non-negative number (what the provider billed), else None."""
    return reported(usage.get("cost") if isinstance(usage, dict) else None)


def checked_decision(request: DecisionRequest, answer: Any, *, model_family: str,
                     http_status: int | None = None) -> DecisionResponse:
    """Validate a provider's decision object and turn it into a :class:`DecisionResponse`.

    Invalid answers raise ``bad_response`` that still carries the billed cost, if any."""
    try:
        validate_answers(request.questions, answer, model_family=model_family)
    except DecisionValidationError as exc:
        usage = answer.get("usage") if isinstance(answer, dict) else None
        raise ProviderError(BAD_RESPONSE, f"invalid decision: {exc.message}", http_status=http_status,
                            cost_reported=reported_cost(usage)) from exc
    usage = answer.get("usage") or None
    return DecisionResponse(
        model=answer["model"],
        answers=answer["answers"],
        usage=usage,
        tokens_in=(usage or {}).get("input_tokens"),
        tokens_out=(usage or {}).get("output_tokens"),
        tokens_total=(usage or {}).get("total_tokens"),
        cost_reported=reported_cost(usage),
    )


def checked_payload(offer: Offer, request: DecisionRequest) -> dict[str, Any]:
    """The ``{state, questions}`` payload, refused (``bad_request``) before any spend when invalid."""
    payload = {"state": request.state, "questions": request.questions}
    try:
        validate_payload(payload)
    except DecisionValidationError as exc:
        raise ProviderError(BAD_REQUEST, f"{exc.message} (offer {offer.id})") from exc
    return payload


class DecisionsTransport:
    """Decision offers reached over the native decisions wire format. Stateless."""

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        payload = checked_payload(offer, request)
        url = endpoint(offer, "decisions")
        headers, key = await bearer_headers(offer)
        reply = await post_json(url, {"model": offer.model, **payload}, headers=headers, timeout_s=timeout_s,
                                max_body_bytes=DECISION_RESPONSE_MAX_BYTES, secrets=(key,))
        error = error_for_status(reply.status, reply.body, (key,))
        if error is not None:
            raise error
        try:
            answer = strict_loads(reply.body)
        except StrictJSONError as exc:
            raise ProviderError(BAD_RESPONSE, f"decision response is not strict JSON ({exc})",
                                http_status=reply.status) from exc
        return checked_decision(request, answer, model_family=offer.family, http_status=reply.status)

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        raise ProviderError(BAD_REQUEST, f"offer {offer.id} answers decisions, not chat")
