"""Costs and tokens of a flow from its ``flow_nodes`` entries (docs/behaviour.md#cost-rules).

The aggregate cost is known only if every traced node's cost is known (data and skipped nodes cost
0; a model node costs its ``cost_reported`` when that is a non-negative number, else its prices ×
tokens when both token counts are present, and is unknown whatever its figures when its entry says
``failed_cost_known: false``: an attempt before its answer failed and may have been billed) and every routing decision's cost is known (the
``routing`` entry of a decision-routed llm node, docs/behaviour.md#decision-routing); otherwise it is ``None``, never a
partial sum. Token sums include the routing decisions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..cost import NODE_DECIMALS, priced, reported
from ..jsonutil import is_finite_number
from ..records import record

_is_number = is_finite_number


def node_cost(entry: Mapping[str, Any]) -> float | None:
    """The USD cost of one traced node (its routing decision included), or ``None`` when it is unknown."""
    cost = _call_cost(entry)
    routing = entry.get("routing")
    if cost is None or not isinstance(routing, Mapping):
        return cost
    routing_cost = routing.get("cost_usd")
    if not (_is_number(routing_cost) and routing_cost >= 0):
        return None
    return cost + float(routing_cost)


def _call_cost(entry: Mapping[str, Any]) -> float | None:
    if entry.get("failed_cost_known") is False:  # a failed attempt before the answer may have been billed: unknown
        return None
    provider_cost = reported(entry.get("cost_reported"))
    if provider_cost is not None:
        return provider_cost
    price_in, price_out = entry.get("raw_price_in"), entry.get("raw_price_out")
    tokens_in, tokens_out = entry.get("tokens_in"), entry.get("tokens_out")
    if not all(_is_number(v) for v in (price_in, price_out, tokens_in, tokens_out)):
        return None
    return priced(price_in, price_out, tokens_in, tokens_out, entry.get("tokens_cached"))


@record(frozen=True, slots=True)
class FlowTotals:
    """Aggregate cost (``None`` = unknown) and token sums (``None`` when the sum is 0)."""

    cost_usd: float | None
    tokens_in: int | None
    tokens_out: int | None
    tokens_cached: int | None


def aggregate(entries: Iterable[Mapping[str, Any]]) -> FlowTotals:
    """Totals over the traced nodes, in one pass over them (each key's sum adds the entries, each one's
    routing decision after it, in order)."""
    costs: list[float] = []
    known = True
    tokens_in = tokens_out = tokens_cached = 0
    for entry in entries:
        cost = node_cost(entry)
        get = entry.get
        routing = get("routing")
        if isinstance(routing, Mapping):
            tokens_in += get("tokens_in") or 0
            tokens_in += routing.get("tokens_in") or 0
            tokens_out += get("tokens_out") or 0
            tokens_out += routing.get("tokens_out") or 0
            tokens_cached += get("tokens_cached") or 0
            tokens_cached += routing.get("tokens_cached") or 0
        else:
            tokens_in += get("tokens_in") or 0
            tokens_out += get("tokens_out") or 0
            tokens_cached += get("tokens_cached") or 0
        if cost is None:
            known = False
        else:
            costs.append(cost)
    return FlowTotals(
        cost_usd=round(math.fsum(costs), NODE_DECIMALS) if known else None,
        tokens_in=tokens_in or None, tokens_out=tokens_out or None, tokens_cached=tokens_cached or None,
    )
