"""Flows of independent decision → generation chains joined by a union (concurrency tests, benchmark)."""

from __future__ import annotations

from typing import Any

from .triage import POLICY

CHOICE = {"type": "choice", "instructions": "Is this worth answering?",
          "criteria": {"yes": "Answer it", "no": "Leave it"}}


def chain_flow(count: int, *, decision: dict[str, Any] | None = None, llm: dict[str, Any] | None = None) -> list[Any]:
    """``count`` chains ``pick_i`` (project) → ``ask_i`` (decision) → ``say_i`` (JSON llm) → ``merged``."""
    nodes: dict[str, Any] = {"input": {"kind": "input"}}
    for i in range(count):
        nodes[f"pick_{i}"] = {"kind": "data", "operation": "project", "inputs": ["input"], "path": [f"c{i}"]}
        nodes[f"ask_{i}"] = {"kind": "decision", "inputs": [f"pick_{i}"], "policy": POLICY,
                             "questions": {f"c{i}": CHOICE}, **(decision or {})}
        nodes[f"say_{i}"] = {"kind": "llm", "inputs": [f"ask_{i}"], "policy": POLICY, "system": f"Chain {i}.",
                             "context": "inputs", "output_format": "json", **(llm or {})}
    nodes["merged"] = {"kind": "data", "operation": "union", "inputs": [f"say_{i}" for i in range(count)]}
    nodes["output"] = {"kind": "output", "inputs": ["merged"]}
    return ["flow", nodes]


def chain_input(count: int) -> dict[str, Any]:
    return {f"c{i}": {f"q{i}": f"item {i}"} for i in range(count)}


def chain_reply(request: Any) -> Any:
    """A JSON reply keyed by the chain's number, read back from the system prompt."""
    from compactor.providers.base import ChatResponse

    number = request.messages[0]["content"].removeprefix("Chain ").removesuffix(".")
    return ChatResponse(text=f'{{"c{number}": "answer {number}"}}', finish_reason="stop", tokens_in=10, tokens_out=3)
