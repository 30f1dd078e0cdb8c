"""Reasoning models' settings and output budget (docs/providers.md "Reasoning models").

A reasoning model's output limit counts its hidden reasoning as well as its answer: OpenAI's
``max_completion_tokens`` (o-series, gpt-5), Anthropic's and Bedrock's ``max_tokens`` with extended thinking.
A call asking for an answer of ``max_tokens`` is therefore sent a limit of ``max_tokens`` plus the offer's
reasoning room (:func:`output_limit`), so that the answer keeps the budget it was given.

The catalog says which offers reason, per offer: ``reasoning_effort`` (OpenAI's own parameter, sent by the
transports that speak Chat Completions) and ``reasoning_budget_tokens`` (the room; for Anthropic and Bedrock
the extended-thinking budget, which turns thinking on). :func:`refusal` is the catalog's check that the
offer's transport can send what it states (``TransportKind.reasoning``).
"""

from __future__ import annotations

from typing import Final

from compactor.providers.base import Offer
from compactor.providers.registry import TRANSPORTS

# OpenAI's ``reasoning_effort`` values (``none`` and ``xhigh`` only some models take: the provider says so).
EFFORTS: Final = ("none", "minimal", "low", "medium", "high", "xhigh")
# The reasoning room of an offer that states an effort and no ``reasoning_budget_tokens``.
ROOM_BY_EFFORT: Final = {"none": 0, "minimal": 1024, "low": 4096, "medium": 8192, "high": 16384, "xhigh": 32768}
# The room of an OpenAI model found to be a reasoning model (it refused ``max_tokens``) whose offer states
# neither setting: that of OpenAI's default effort, ``medium``.
DEFAULT_ROOM: Final = ROOM_BY_EFFORT["medium"]
# Anthropic's least thinking budget; the most room any setting may ask for.
MIN_BUDGET_TOKENS: Final = 1024
MAX_BUDGET_TOKENS: Final = 128_000


# Bedrock sends ``reasoning_budget_tokens`` as Claude's extended thinking, which its other models refuse (every
# call a ValidationException): a model id naming Claude, or an ARN (an application inference profile), takes it.
_BEDROCK_THINKING_MODEL = "anthropic.claude"


def refusal(transport: str, effort: str | None, budget_tokens: int | None, model: str = "") -> str | None:
    """Why an offer of ``transport`` (one of :data:`~compactor.providers.registry.TRANSPORTS`) and ``model``
    cannot carry these settings (a catalog error), or ``None``."""
    if budget_tokens is not None and transport == "bedrock" and _BEDROCK_THINKING_MODEL not in model \
            and not model.startswith("arn:"):
        return (f"bedrock sends reasoning_budget_tokens as Claude's extended thinking "
                f"(additionalModelRequestFields.thinking), which model {model!r} does not take")
    sends = TRANSPORTS[transport].reasoning
    for name, value in (("reasoning_effort", effort), ("reasoning_budget_tokens", budget_tokens)):
        if value is None or name in sends:
            continue
        if not sends:
            return f"{transport} offers take no {name}: the transport has no way to send it"
        return (f"{transport} offers take no {name}: the transport cannot send it; "
                f"set {' or '.join(sorted(sends))} instead")
    return None


def room_of(effort: str | None, budget_tokens: int | None) -> int:
    """The output tokens kept for reasoning by these settings: ``budget_tokens``, else the effort's room
    (:data:`ROOM_BY_EFFORT`), else 0."""
    if budget_tokens is not None:
        return budget_tokens
    return ROOM_BY_EFFORT.get(effort, 0) if effort is not None else 0


def reasoning_room(offer: Offer) -> int:
    """The output tokens kept for the offer's reasoning (:func:`room_of` of its settings)."""
    return room_of(offer.reasoning_effort, offer.reasoning_budget_tokens)


def output_limit(offer: Offer, answer_tokens: int) -> int:
    """The output limit sent for an answer of ``answer_tokens``: that plus the offer's reasoning room."""
    return answer_tokens + reasoning_room(offer)

