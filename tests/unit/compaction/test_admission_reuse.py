"""Decision mode admits the preset's flow through the router's admission cache (docs/performance.md): the
same request again reuses it, another request or another router admits its own, and the answers are
those of a fresh admission."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from compactor.budget import Deadline
from compactor.models import CompactRequest
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from compactor.providers.base import ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer
from compactor.router import Router
from compactor.service import compact

from .fixtures import tool_unit

OFFERS = (
    Offer(id="t/decider", provider="t", family="decider", model="decider-1", protocol="decisions",
          transport="t", price_in=0.5, price_out=2.0, observations={"supports_json_mode": True}),
    Offer(id="t/summarizer", provider="t", family="summarizer", model="summarizer-1", protocol="chat",
          transport="t", price_in=3.0, price_out=15.0, observations={"supports_json_mode": True}),
)


class Summarizing:
    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        answers = {q: {"type": "choice", "choice": "summarize", "confidence": 0.9} for q in request.questions}
        return DecisionResponse(model=offer.model, answers=answers, tokens_in=100, tokens_out=10)

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        items = json.loads(request.messages[-1]["content"])
        return ChatResponse(text=json.dumps({key: f"ran {key}" for key in items}), finish_reason="stop",
                            tokens_in=200, tokens_out=20)


def router() -> Router:
    transport = Summarizing()
    return Router(OFFERS, transport_for=lambda offer: transport, clock=lambda: 0.0)  # latencies of 0: answers compare


def body(name: str = "a.py", policy: Any = DEFAULT_DECISIONS_POLICY) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Fix it."}]
    for i in range(6):
        messages += tool_unit(f"c{i}", f"cat src/{name} && pytest -q t{i}.py", f"{i} src/{name}: ok " * 300)
    messages.append({"role": "assistant", "content": "Done."})
    return {"messages": messages, "keep_recent": 1, "target_ratio": 0.1, "decision_policy_ir": copy.deepcopy(policy)}


def run(fields: dict[str, Any], on: Router) -> dict[str, Any]:
    status, answer = asyncio.run(compact(CompactRequest.model_validate(fields), deadline=Deadline.after_ms(30_000),
                                         router=on))
    assert status == 200, answer
    return answer


def test_the_same_request_again_takes_its_flow_from_the_cache_with_the_same_answer() -> None:
    warm = router()
    first = run(body(), warm)
    assert first["compaction"]["fragments"] and first["compacted"]
    again = run(body(), warm)
    admissions = warm.flow_admissions
    assert (admissions.hits, admissions.misses) == (1, 1)
    assert again == first == run(body(), router())  # a fresh router admits it anew: the same answer


def test_another_request_or_policy_is_admitted_anew() -> None:
    warm = router()
    run(body(), warm)
    other_names = run(body("b.py"), warm)  # other names in the summary prompts: another flow
    other_policy = copy.deepcopy(DEFAULT_DECISIONS_POLICY)
    other_policy[2] = ["field", "price_in"]
    other = run(body(policy=other_policy), warm)
    assert (warm.flow_admissions.hits, warm.flow_admissions.misses) == (0, 3)
    assert other_names == run(body("b.py"), router()) and other == run(body(policy=other_policy), router())
