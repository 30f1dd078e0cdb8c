"""Benchmark of the flow runtime (run: ``.venv/bin/python tests/benchmarks/flow_concurrency.py``).

1. Concurrency: a fake provider answers every call after a fixed latency L; a flow of 32 independent
   decision → generation chains should finish in about one chain's time. Prints wall / (2·L);
   the goal is ≤ 1.25 (sequential execution would give 32).
2. CPU overhead: a 227-node flow shaped like a batched classify/select/generate/overlay pipeline
   (4 items per batch: the union of all patches is one record map of 128 keys) with ~900 KB of flow input, on a zero-latency provider. Prints admission and run times.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from compactor.budget import Deadline
from compactor.flow import admit_flow, run_flow
from compactor.policy import admit_policy
from compactor.providers.base import ChatResponse, DecisionResponse, Offer
from compactor.router import AdmittedPolicy, RouteResult

LATENCY_S = 0.1
CHAINS = 32
GOAL = 1.25
POLICY = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
          ["top_k", 4, ["argmax"]], ["id"], ["always", {"action": "next_candidate"}]]
CHOICE = {"type": "choice", "instructions": "Classify this item for the current task.",
          "criteria": {"keep": "Preserve verbatim", "shorten": "Rewrite shorter", "drop": "Remove"}}
OFFER = Offer(id="bench/model", provider="bench", family="bench", model="bench-1", protocol="chat",
              transport="builtin", price_in=0.0, price_out=0.0)


class LatencyRouter:
    """Answers every call after ``latency_s``: decisions pick a choice by item number, chats echo
    shortened JSON of what they were given."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.calls = 0

    def admit_policy(self, term: Any) -> AdmittedPolicy:
        return AdmittedPolicy(admit_policy(term))

    async def decide(self, policy: Any, request: Any, *, deadline: Any = None, timeout_s: Any = None) -> RouteResult:
        self.calls += 1
        await asyncio.sleep(self.latency_s)
        labels = list(CHOICE["criteria"])
        answers = {name: {"type": "choice", "choice": labels[int(name.rsplit("_", 1)[1]) % 3]}
                   for name in request.questions}
        return RouteResult(ok=True, response=DecisionResponse(model="bench-1", answers=answers, tokens_in=1,
                                                              tokens_out=1), chosen=OFFER, cost_usd=0.0,
                           failed_cost_known=True)

    async def chat(self, policy: Any, request: Any, *, needs: Any = None, deadline: Any = None,
                   timeout_s: Any = None) -> RouteResult:
        self.calls += 1
        await asyncio.sleep(self.latency_s)
        given = json.loads(request.messages[-1]["content"])
        reply = json.dumps({key: str(value)[:20] for key, value in given.items()})
        return RouteResult(ok=True, response=ChatResponse(text=reply, finish_reason="stop", tokens_in=1,
                                                          tokens_out=1), chosen=OFFER, cost_usd=0.0,
                           failed_cost_known=True)


def chains_flow(count: int) -> tuple[list[Any], dict[str, Any]]:
    nodes: dict[str, Any] = {"input": {"kind": "input"}}
    for i in range(count):
        nodes[f"pick_{i}"] = {"kind": "data", "operation": "project", "inputs": ["input"], "path": [f"c{i}"]}
        nodes[f"ask_{i}"] = {"kind": "decision", "inputs": [f"pick_{i}"], "policy": POLICY,
                             "questions": {f"item_{i}": CHOICE}}
        nodes[f"say_{i}"] = {"kind": "llm", "inputs": [f"ask_{i}"], "policy": POLICY, "system": f"Chain {i}.",
                             "context": "inputs", "output_format": "json"}
    nodes["merged"] = {"kind": "data", "operation": "union", "inputs": [f"say_{i}" for i in range(count)]}
    nodes["output"] = {"kind": "output", "inputs": ["merged"]}
    return ["flow", nodes], {f"c{i}": {"item": i} for i in range(count)}


def batched_flow(batches: int = 32, per_batch: int = 4) -> tuple[list[Any], dict[str, Any]]:
    """``batches`` × (state, items, classify, selected, generate, removed, patch) + merged: 227 nodes."""
    nodes: dict[str, Any] = {"input": {"kind": "input"}}
    flow_input: dict[str, Any] = {}
    for b in range(batches):
        key, names = f"batch_{b}", [f"item_{b * per_batch + j}" for j in range(per_batch)]
        flow_input[key] = {
            "state": {"notes": ["context line " * 40] * 28, "items": [{"id": n, "text": "x" * 300} for n in names]},
            "items": {n: "payload " * 370 for n in names},
        }
        p = f"{key}_"
        nodes.update({
            p + "state": {"kind": "data", "operation": "project", "inputs": ["input"], "path": [key, "state"]},
            p + "items": {"kind": "data", "operation": "project", "inputs": ["input"], "path": [key, "items"]},
            p + "classify": {"kind": "decision", "inputs": [p + "state"], "policy": POLICY,
                             "questions": {n: CHOICE for n in names}, "on_error": "input", "timeout_ms": 7000},
            p + "selected": {"kind": "data", "operation": "select", "inputs": [p + "items", p + "classify"],
                             "field": "choice", "equals": "shorten"},
            p + "generate": {"kind": "llm", "inputs": [p + "selected"], "policy": POLICY, "system": "Shorten.",
                             "context": "inputs", "output_format": "json", "skip_empty": True,
                             "on_error": "input", "max_tokens": 512, "timeout_ms": 20000},
            p + "removed": {"kind": "data", "operation": "select", "inputs": [p + "items", p + "classify"],
                            "field": "choice", "equals": "drop"},
            p + "patch": {"kind": "data", "operation": "overlay", "inputs": [p + "items", p + "generate", p + "removed",
                                                                    p + "selected"],
                          "min_string_bytes": 1, "max_string_bytes": 256, "only_shrink": True, "on_error": "input"},
        })
    nodes["merged"] = {"kind": "data", "operation": "union", "inputs": [f"batch_{b}_patch" for b in range(batches)]}
    nodes["output"] = {"kind": "output", "inputs": ["merged"]}
    return ["flow", nodes], flow_input


async def concurrency_ratio() -> float:
    router = LatencyRouter(LATENCY_S)
    flow, flow_input = chains_flow(CHAINS)
    admitted = admit_flow(flow, admit_policy=router.admit_policy, flow_input=flow_input)
    started = time.perf_counter()
    result = await run_flow(admitted, flow_input, router=router, deadline=Deadline.after_ms(40_000))
    wall = time.perf_counter() - started
    assert result.ok and len(result.output) == CHAINS and router.calls == 2 * CHAINS
    return wall / (2 * LATENCY_S)


async def overhead() -> tuple[int, int, float, float]:
    router = LatencyRouter(0.0)
    flow, flow_input = batched_flow()
    input_bytes = len(json.dumps(flow_input, separators=(",", ":")).encode())
    started = time.perf_counter()
    admitted = admit_flow(flow, admit_policy=router.admit_policy, flow_input=flow_input)
    admitted_at = time.perf_counter()
    result = await run_flow(admitted, flow_input, router=router, deadline=Deadline.after_ms(40_000))
    finished = time.perf_counter()
    assert result.ok and len(admitted.nodes) == 227
    return len(admitted.nodes), input_bytes, (admitted_at - started) * 1000, (finished - admitted_at) * 1000


def main() -> int:
    ratios = [asyncio.run(concurrency_ratio()) for _ in range(3)]
    print(f"flow_concurrency: {CHAINS} decision→generation chains, provider latency L = {LATENCY_S * 1000:.0f} ms")
    print(f"  wall / (2·L): best {min(ratios):.3f}, median {statistics.median(ratios):.3f} (goal ≤ {GOAL}; "
          f"sequential ≈ {CHAINS})  {'OK' if statistics.median(ratios) <= GOAL else 'ABOVE GOAL'}")
    runs = [asyncio.run(overhead()) for _ in range(3)]
    nodes, input_bytes = runs[0][0], runs[0][1]
    print(f"flow_overhead: {nodes} nodes, flow input {input_bytes / 1000:.0f} KB, zero-latency provider")
    print(f"  admission {statistics.median(r[2] for r in runs):.1f} ms, "
          f"run {statistics.median(r[3] for r in runs):.1f} ms (median of 3)")
    return 0 if statistics.median(ratios) <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
