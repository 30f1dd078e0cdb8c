"""The ``x_router`` metadata block and OpenAI ``usage`` of a routed call (docs/behaviour.md#the-x_router-block-and-usage, chat variant)."""

from __future__ import annotations

import os
from typing import Any

from compactor.cost import RESPONSE_DECIMALS, with_failed_attempts
from compactor.router import RouteResult

COMPACT_AT_TOKENS_DEFAULT = 24_000
_COMPACT_AT_TOKENS_RANGE = (1_000, 2_000_000)


def compact_at_tokens() -> int:
    """``COMPACT_AT_TOKENS`` (1000–2 000 000), else 24 000."""
    try:
        value = int(os.environ.get("COMPACT_AT_TOKENS", COMPACT_AT_TOKENS_DEFAULT))
    except ValueError:
        return COMPACT_AT_TOKENS_DEFAULT
    low, high = _COMPACT_AT_TOKENS_RANGE
    return value if low <= value <= high else COMPACT_AT_TOKENS_DEFAULT


def compact_hint(tokens_in: int | None) -> bool:
    """``x_router.compact``: the call's input tokens reached the compaction threshold."""
    return bool(tokens_in) and tokens_in >= compact_at_tokens()


def usage_block(tokens_in: int | None, tokens_out: int | None, tokens_total: int | None,
                tokens_cached: int | None) -> dict[str, Any] | None:
    """OpenAI-shaped usage with only the reported fields; ``None`` when nothing was reported."""
    usage: dict[str, Any] = {}
    if tokens_in is not None:
        usage["prompt_tokens"] = tokens_in
    if tokens_out is not None:
        usage["completion_tokens"] = tokens_out
    if tokens_total is not None:
        usage["total_tokens"] = tokens_total
    if tokens_cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": tokens_cached}
    return usage or None


def route_usage(result: RouteResult) -> dict[str, Any] | None:
    response = result.response
    if response is None:
        return None
    return usage_block(response.tokens_in, response.tokens_out, response.tokens_total,
                       getattr(response, "tokens_cached", None))


def billed_cost(result: RouteResult) -> float | None:
    """The chosen response's cost plus what earlier, failed attempts were billed (``compactor.cost``);
    ``None`` when the chosen cost, or what a failed attempt was billed, is unknown."""
    if not result.ok:
        failed = result.failure_cost()
        return None if failed is None else round(failed, RESPONSE_DECIMALS)
    return with_failed_attempts(result.cost_usd, result.failed_cost_usd, RESPONSE_DECIMALS,
                                failed_known=result.failed_cost_known)


def route_x_router(result: RouteResult) -> dict[str, Any]:
    """The chat-variant block for one routed call, successful or not."""
    from compactor.policy.trace import trim_decision_trace

    chosen, response = result.chosen, result.response
    tokens_in = response.tokens_in if response is not None else None
    cost = billed_cost(result)
    block: dict[str, Any] = {
        "provider": chosen.provider if chosen else None,
        "model_family": chosen.family if chosen else None,
        "served_model_id": (getattr(response, "served_model_id", None) or getattr(response, "model", None)
                            or (chosen.model if chosen else None)),
        "served_by": chosen.provider if chosen else None,
        "price_in": chosen.price_in if chosen else None,
        "price_out": chosen.price_out if chosen else None,
        "cost_usd": cost,
        "cost_basis": result.cost_basis if cost is not None else None,  # no basis for an unknown cost
        "tokens_cached": getattr(response, "tokens_cached", None) if response is not None else None,
        "policy_fingerprint": result.trace.get("policy_fingerprint"),
        "decision_trace": trim_decision_trace(result.trace),
        "compact": compact_hint(tokens_in),
    }
    return block
