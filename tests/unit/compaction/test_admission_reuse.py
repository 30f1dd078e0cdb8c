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


def memo_within_bounds(on: Router) -> bool:
    """What the router's policy and ranking memos hold, counted from the memos themselves, is within their bounds
    (docs/performance.md "The admission and policy memos' memory")."""
    from compactor import router as routing

    texts = [len(text) for text in on._admitted]
    encodings = [len(key[0]) for key in on._rankings]
    return (sum(texts) == on._admitted_chars <= routing._MEMO_CHARS_MAX
            and sum(encodings) == on._rankings_chars <= routing._MEMO_CHARS_MAX
            and max(texts + encodings, default=0) <= routing._POLICY_CHARS_KEPT_MAX
            and len(on._admitted) <= routing._POLICIES_KEPT and len(on._rankings) <= routing._RANKINGS_KEPT)


def with_record_key(key: str) -> list[Any]:
    """The preset's decision policy with an action record that carries ``key`` (an action record accepts any key
    with a number value)."""
    policy = copy.deepcopy(DEFAULT_DECISIONS_POLICY)
    policy[5] = ["always", {"action": "next_candidate", key: 1}]
    return policy


def test_large_policies_leave_the_policy_and_ranking_memos_within_their_bounds(monkeypatch: Any) -> None:
    """Requests each with a distinct ``decision_policy_ir`` (the audit's probe, docs/performance.md): policies of
    100,000 characters are not kept, policies of 7,000 fill the memos up to their characters bound; every answer
    is a fresh router's; the preset's own policies are then kept and found again (not admitted or ranked again)."""
    from compactor import router as routing

    warm = router()
    admitted_chars = []
    for i in range(160):
        policy = with_record_key(f"{i}-" + "k" * (100_000 if i % 40 == 0 else 7_000))
        answer = run(body(policy=policy), warm)
        assert memo_within_bounds(warm), i
        admitted_chars.append(warm._admitted_chars)
        if i % 40 == 0:
            assert answer == run(body(policy=policy), router())
            assert all(len(text) < 10_000 for text in warm._admitted)
    assert max(admitted_chars) > routing._MEMO_CHARS_MAX - 8_000  # the characters bound was reached
    assert min(admitted_chars[120:]) < max(admitted_chars)  # and the memo was emptied
    run(body(), warm)
    admissions: list[Any] = []
    rankings: list[Any] = []
    real_admit, real_rank = routing.admit_policy, routing.rank
    monkeypatch.setattr(routing, "admit_policy", lambda *a, **k: admissions.append(a) or real_admit(*a, **k))
    monkeypatch.setattr(routing, "rank", lambda *a, **k: rankings.append(a) or real_rank(*a, **k))
    assert run(body("c.py"), warm) == run(body("c.py"), router())  # (the fresh router admits and ranks anew)
    assert len(admissions) == 2 and len(rankings) == 2  # the warm router admitted and ranked nothing


def test_a_policy_at_the_kept_size_is_kept_and_one_character_more_is_not() -> None:
    from compactor import router as routing
    from compactor.jsonutil import dense_dumps

    base = len(dense_dumps(with_record_key("")))
    for extra in (0, 1):
        on = router()
        policy = with_record_key("k" * (routing._POLICY_CHARS_KEPT_MAX - base + extra))
        admitted = on.admit_policy(policy)
        assert (on.admit_policy(copy.deepcopy(policy)) is admitted) is (extra == 0)
        assert len(on._admitted) == 1 - extra and memo_within_bounds(on)
        assert len(admitted.encoding) < len(dense_dumps(policy))  # so the ranking of a policy kept is kept too
