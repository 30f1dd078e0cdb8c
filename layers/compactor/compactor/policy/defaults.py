"""The host's default policies, as submitted Σ_pol terms (admit them before use)."""

from __future__ import annotations

from typing import Any

# docs/behaviour.md#requests-and-responses "cheapest healthy route": the default chat/generation policy.
DEFAULT_CHAT_POLICY: list[Any] = [
    "policy",
    ["and", ["meets_req"], ["not", ["is", "disabled"]]],
    ["neg", ["normalize", ["field", "price_in"]]],
    ["argmax"],
    ["id"],
    ["always", {"action": "next_candidate"}],
]

# docs/behaviour.md#native-decisions: cheapest healthy decision offers, closed breakers first, at most four tried.
DEFAULT_DECISIONS_POLICY: list[Any] = [
    "policy",
    ["and", ["meets_req"], ["not", ["is", "disabled"]]],
    ["neg", ["field", "price_in"]],
    ["top_k", 4, ["prefer", ["not", ["is", "breaker_open"]], ["argmax"]]],
    ["id"],
    ["always", {"action": "next_candidate"}],
]
