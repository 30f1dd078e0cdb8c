"""The result of running a flow, with its ``x_router`` block and OpenAI ``usage``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Final

from ..cost import RESPONSE_DECIMALS
from ..policy.trace import trim_decision_trace
from ..records import record
from ..response_blocks import usage_block

FLOW_NODE_FAILED: Final = "flow_node_failed"


@record
class FlowResult:
    """How a flow ended. ``flow_nodes`` holds one entry per executed ``llm``/``decision``/``data`` node
    in canonical order; ``cost_usd`` is ``None`` when any traced node's cost is unknown; token totals
    are ``None`` when 0. ``failed_node`` is the canonical id of the node that stopped the flow.
    ``answer_reasons`` holds the ``reason`` text that decision answers carried, by question name
    (answers may add a short reason beside their choice; docs/offline-offers.md)."""

    ok: bool
    output: Any
    failed_node: str | None
    error_kind: str | None
    error_message: str | None
    flow_nodes: list[dict[str, Any]]
    fingerprint: str
    cost_usd: float | None
    tokens_in: int | None
    tokens_out: int | None
    tokens_cached: int | None
    answer_reasons: dict[str, str] = field(default_factory=dict)
    retry_after_s: float | None = None  # failed on a provider's Retry-After: the wait it asked for (RouteResult's)

    def decision_trace(self) -> dict[str, Any]:
        """The untrimmed flow trace ``{"policy_fingerprint": null, "flow_fingerprint", "flow_nodes"}``
        plus ``failed_node`` and ``flow_error`` on failure."""
        trace: dict[str, Any] = {"policy_fingerprint": None, "flow_fingerprint": self.fingerprint,
                                 "flow_nodes": self.flow_nodes}
        if not self.ok:
            trace["failed_node"] = self.failed_node
            trace["flow_error"] = FLOW_NODE_FAILED
        return trace

    def public_cost(self) -> float | None:
        """The flow's cost as a response shows it (the cost module's rounding), ``None`` when unknown."""
        return None if self.cost_usd is None else round(self.cost_usd, RESPONSE_DECIMALS)

    @property
    def cost_basis(self) -> str | None:
        """``reported`` when the flow's cost is known (summed from its nodes), else ``None``."""
        return "reported" if self.cost_usd is not None else None

    def x_router(self) -> dict[str, Any]:
        """The flow variant of the ``x_router`` block (docs/behaviour.md#the-x_router-block-and-usage), decision traces trimmed."""
        family = f"flow:{self.fingerprint}"
        return {
            "provider": "flow",
            "model_family": family,
            "served_model_id": family,
            "served_by": None,
            "price_in": None,
            "price_out": None,
            "cost_usd": self.public_cost(),
            "cost_basis": self.cost_basis,
            "tokens_cached": self.tokens_cached,
            "policy_fingerprint": None,
            "decision_trace": trim_decision_trace(self.decision_trace()),
        }

    def usage(self) -> dict[str, Any] | None:
        """OpenAI-shaped usage from the token totals, or ``None`` when no tokens were reported."""
        total = None
        if self.tokens_in is not None or self.tokens_out is not None:
            total = (self.tokens_in or 0) + (self.tokens_out or 0)
        return usage_block(self.tokens_in, self.tokens_out, total, self.tokens_cached)


MAX_REASON_CHARS: Final = 64


def answer_reasons(answers: Any) -> dict[str, str]:
    """The short ``reason`` string of each decision answer that has one (cut to 64 characters)."""
    if not isinstance(answers, dict):
        return {}
    return {name: answer["reason"][:MAX_REASON_CHARS] for name, answer in answers.items()
            if isinstance(answer, dict) and isinstance(answer.get("reason"), str) and answer["reason"]}


RESULT_FIELDS: Final = ("ok", "output", "failed_node", "error_kind", "error_message", "flow_nodes", "fingerprint",
                        "cost_usd", "tokens_in", "tokens_out", "tokens_cached", "answer_reasons", "retry_after_s")
OPTIONAL_RESULT_FIELDS: Final = frozenset({"answer_reasons", "retry_after_s"})  # results stored before they existed


def result_to_json(result: FlowResult) -> dict[str, Any]:
    """A JSON-ready form of a result (every field, by name)."""
    return {name: getattr(result, name) for name in RESULT_FIELDS}


def result_from_json(data: Mapping[str, Any]) -> FlowResult:
    """The inverse of :func:`result_to_json`; a missing field raises ``KeyError`` (optional ones default)."""
    return FlowResult(**{name: data[name] for name in RESULT_FIELDS
                         if name in data or name not in OPTIONAL_RESULT_FIELDS})
