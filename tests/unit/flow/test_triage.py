"""The ticket-triage flow end to end on fake providers, and every fallback path with its cost."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from compactor.budget import Deadline
from compactor.flow import admit_flow, run_flow, scheduler
from compactor.jsonutil import ascii_wire_size
from compactor.providers.base import ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError
from compactor.router import RouteResult

from .fake_router import FakeRouter
from .triage import DRAFT_SYSTEM, FLOW_INPUT, TICKETS, triage_flow

DECISION_COST = 100 / 1e6 * 0.5 + 10 / 1e6 * 0.5  # fake decider: 100 in, 10 out at 0.5/0.5 per million
DRAFT_COST = 200 / 1e6 * 1.0 + 40 / 1e6 * 2.0  # fake writer: 200 in, 40 out at 1/2 per million
REPLIES = {"t1": "Facilities are on their way.", "t2": "A reset link is on its way."}
ORIGINALS_WITHOUT_SPAM = {"t1": TICKETS["t1"], "t2": TICKETS["t2"]}


@pytest.fixture(autouse=True, params=[True, False], ids=["eager", "lazy"])
def task_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every test of this module runs with node tasks started eagerly (Python 3.12+) and lazily."""
    monkeypatch.setattr(scheduler, "EAGER_START", request.param and scheduler.EAGER_START)
    return request.param


def routed_answers(choices: dict[str, str]):
    def decide(request: DecisionRequest) -> DecisionResponse:
        answers = {name: {"type": "choice", "choice": choices[name], "confidence": 0.8} for name in request.questions}
        return DecisionResponse(model="fake-decider-1", answers=answers, tokens_in=100, tokens_out=10)
    return decide


TRIAGED = routed_answers({"t1": "support", "t2": "support", "t3": "spam"})


def replying(text: str | None, finish_reason: str = "stop", **fields: Any):
    def chat(request: Any) -> ChatResponse:  # the same reply on every call (each test runs twice: task_start)
        return ChatResponse(text=text, finish_reason=finish_reason, tokens_in=200, tokens_out=40, **fields)
    return chat


async def run(router: FakeRouter, flow: list[Any] | None = None, *, budget_ms: int = 40_000):
    admitted = admit_flow(flow or triage_flow(), admit_policy=router.admit_policy, flow_input=FLOW_INPUT)
    return await run_flow(admitted, FLOW_INPUT, router=router, deadline=Deadline.after_ms(budget_ms))


def by_label(result: Any, admitted_flow: list[Any] | None = None) -> dict[str, dict[str, Any]]:
    admitted = admit_flow(admitted_flow or triage_flow(), admit_policy=FakeRouter().admit_policy)
    labels = {node.cid: node.label for node in admitted.nodes}
    return {labels[entry["node"]]: entry for entry in result.flow_nodes}


async def test_happy_path() -> None:
    router = FakeRouter(decide=TRIAGED, chat=replying(json.dumps(REPLIES)))
    result = await run(router)
    assert result.ok and result.output == REPLIES
    decide, chat = router.calls
    assert decide.request.state == TICKETS and set(decide.request.questions) == set(TICKETS)
    # the size the runtime checked against the 32 000-byte bound travels with the request (the router's bound)
    assert decide.request.wire_bytes == ascii_wire_size({"state": TICKETS, "questions": decide.request.questions})
    assert decide.timeout_s == 7.0
    assert chat.request.messages == [
        {"role": "system", "content": DRAFT_SYSTEM},
        {"role": "user", "content": json.dumps(ORIGINALS_WITHOUT_SPAM, separators=(",", ":"))}]
    assert chat.request.json_mode and chat.request.max_tokens == 256 and chat.timeout_s == 20.0
    # canonical order: the spam select sorts before the support select (equals "spam" < "support")
    assert [e["kind"] for e in result.flow_nodes] == ["data", "decision", "data", "data", "llm", "data"]
    assert [e["node"] for e in result.flow_nodes] == ["n1", "n2", "n3", "n4", "n5", "n6"]
    assert result.cost_usd == pytest.approx(DECISION_COST + DRAFT_COST)
    assert (result.tokens_in, result.tokens_out, result.tokens_cached) == (300, 50, None)
    entries = by_label(result)
    assert entries["draft"]["provider"] == "fakechat" and entries["draft"]["cost_reported"] == pytest.approx(DRAFT_COST)
    assert entries["classify"]["served_model_id"] == "fake-decider-1"
    assert entries["support"] == {"node": entries["support"]["node"], "kind": "data",
                                  "inputs": [entries["tickets"]["node"], entries["classify"]["node"]],
                                  "cost_reported": 0}


BAD_JSON = [
    ("unparseable", replying("Sure! Here are the replies: t1 ..."), "invalid JSON output"),
    ("duplicate key", replying('{"t1": "Short.", "t1": "Other."}'), "duplicate key"),
    ("truncated", replying('{"t1": "Facilities are', finish_reason="length"), "cut off (finish_reason length)"),
    ("tool calls", replying(None, tool_calls=[{"id": "c1", "type": "function"}]), "tool calls instead of an answer"),
    ("filtered", replying("{\"t1\": \"Sorry.\"}", finish_reason="content_filter"), "refused or filtered"),
    ("empty", replying(""), "empty JSON output"),
    ("non-finite", replying('{"t1": NaN}'), "non-finite number"),
    ("too deep", replying("[" * 40 + "]" * 40), "nested deeper than 32"),
    ("too large", replying(json.dumps({"t1": "x" * 1_048_576})), "exceeds 1048576 bytes"),
    ("raw lone surrogate", replying('{"t1": "a\ud800"}'), "not valid Unicode"),
    ("escaped lone surrogate", replying('{"t1": "a\\ud800"}'), "lone surrogate"),
    ("escaped lone surrogate in a key", replying('{"t1": "a", "\\uDFFF": "b"}'), "lone surrogate"),
]


@pytest.mark.parametrize(("chat", "error"), [(c, e) for _, c, e in BAD_JSON], ids=[n for n, _, _ in BAD_JSON])
async def test_rejected_json_keeps_the_originals_and_the_cost(chat: Any, error: str) -> None:
    router = FakeRouter(decide=TRIAGED, chat=chat)
    result = await run(router)
    assert result.ok and result.output == ORIGINALS_WITHOUT_SPAM
    draft = by_label(result)["draft"]
    assert draft["fallback"] == "input" and draft["error"].startswith("bad_response: ") and error in draft["error"]
    assert draft["cost_reported"] == pytest.approx(DRAFT_COST)  # billed, then rejected
    assert result.cost_usd == pytest.approx(DECISION_COST + DRAFT_COST)


async def test_invented_id_makes_the_overlay_fall_back_to_every_original() -> None:
    router = FakeRouter(decide=TRIAGED, chat=replying('{"t1": "Short.", "t9": "Invented."}'))
    result = await run(router)
    assert result.ok and result.output == TICKETS  # whole map kept, spam removal included
    answered = by_label(result)["answered"]
    assert answered["fallback"] == "input"
    assert answered["error"] == "data_error: overlay: replacement key 't9' is not in the base"
    assert result.cost_usd == pytest.approx(DECISION_COST + DRAFT_COST)


async def test_summary_that_does_not_shrink_is_not_taken() -> None:
    router = FakeRouter(decide=TRIAGED, chat=replying(json.dumps({"t1": TICKETS["t1"] + "!", "t2": "Done."})))
    result = await run(router)
    assert result.output == {"t1": TICKETS["t1"], "t2": "Done."}


async def test_chat_provider_error_falls_back_with_unknown_cost() -> None:
    router = FakeRouter(decide=TRIAGED, chat=lambda request: ProviderError("upstream_error", "HTTP 500"))
    result = await run(router)
    assert result.ok and result.output == ORIGINALS_WITHOUT_SPAM
    draft = by_label(result)["draft"]
    assert draft["error"] == "exhausted: upstream_error: HTTP 500" and draft["fallback"] == "input"
    assert "cost_reported" not in draft
    assert result.cost_usd is None
    assert result.x_router()["cost_usd"] is None and result.x_router()["cost_basis"] is None


async def test_decision_provider_error_keeps_everything_and_skips_the_draft() -> None:
    router = FakeRouter(decide=lambda request: ProviderError("bad_response", "unknown_choice"), chat=replying("{}"))
    result = await run(router)
    assert result.ok and result.output == TICKETS
    entries = by_label(result)
    assert entries["classify"]["fallback"] == "input"
    assert entries["draft"] == {"node": entries["draft"]["node"], "kind": "llm",
                                "inputs": [entries["support"]["node"]], "skipped": True, "cost_reported": 0}
    assert [call.kind for call in router.calls] == ["decide"]
    assert result.cost_usd is None


async def test_no_candidates_costs_nothing() -> None:
    failure = RouteResult(ok=False, response=None, chosen=None, trace={"policy_fingerprint": "1-2", "ranked": []},
                          error_kind="no_candidates", error_message="no offer satisfies the policy")
    router = FakeRouter(decide=lambda request: failure)
    result = await run(router)
    assert result.ok and result.output == TICKETS
    assert by_label(result)["classify"]["cost_reported"] == 0
    assert result.cost_usd == 0.0


async def test_router_exception_is_a_clean_node_failure() -> None:
    def broken(request: Any) -> Any:
        raise RuntimeError("boom")

    result = await run(FakeRouter(decide=TRIAGED, chat=broken))
    assert result.ok and result.output == ORIGINALS_WITHOUT_SPAM
    assert by_label(result)["draft"]["error"] == "node_exception: RuntimeError: boom"
    assert result.cost_usd is None


async def test_decision_timeout_cancels_the_call_and_falls_back() -> None:
    async def slow(request: Any) -> Any:
        await asyncio.sleep(30)

    router = FakeRouter(decide=slow)
    flow = triage_flow(classify={"timeout_ms": 50})
    started = time.monotonic()
    result = await run(router, flow)
    assert time.monotonic() - started < 10
    assert result.ok and result.output == TICKETS
    classify = by_label(result, flow)["classify"]
    assert classify == {"node": classify["node"], "kind": "decision", "inputs": classify["inputs"],
                        "error": "timeout: node timeout after 50 ms; call cancelled", "fallback": "input"}
    assert router.cancelled == ["decide"]
    assert result.cost_usd is None


async def test_generation_timeout_cancels_the_call_and_falls_back() -> None:
    async def slow(request: Any) -> Any:
        await asyncio.sleep(30)

    router = FakeRouter(decide=TRIAGED, chat=slow)
    flow = triage_flow(draft={"timeout_ms": 50})
    result = await run(router, flow)
    assert result.ok and result.output == ORIGINALS_WITHOUT_SPAM
    assert by_label(result, flow)["draft"]["error"] == "timeout: node timeout after 50 ms; call cancelled"
    assert router.cancelled == ["chat"]


async def test_nothing_selected_skips_the_generation() -> None:
    router = FakeRouter(decide=routed_answers({"t1": "billing", "t2": "billing", "t3": "billing"}))
    result = await run(router)
    assert result.ok and result.output == TICKETS
    assert by_label(result)["draft"]["skipped"] is True
    assert [call.kind for call in router.calls] == ["decide"]
    assert result.cost_usd == pytest.approx(DECISION_COST)


async def test_failure_without_fallback_stops_the_flow() -> None:
    flow = triage_flow(classify={"on_error": None})
    router = FakeRouter(decide=lambda request: ProviderError("rate_limit", "HTTP 429"))
    result = await run(router, flow)
    classify = by_label(result, flow)["classify"]
    assert not result.ok and result.output is None
    assert result.failed_node == classify["node"]
    assert result.error_kind == "exhausted: rate_limit"
    assert result.error_message == "exhausted: rate_limit: HTTP 429"
    assert [e["node"] for e in result.flow_nodes] == ["n1", "n2"]  # nothing after the failed node ran
    trace = result.x_router()["decision_trace"]
    assert trace["failed_node"] == classify["node"] and trace["flow_error"] == "flow_node_failed"


async def test_an_answer_after_a_failed_attempt_of_unknown_cost_has_an_unknown_cost() -> None:
    # docs/behaviour.md "Cost rules": a failed attempt that may have been billed an unknown amount (a timeout, an
    # answer refused without a reported cost) makes the routed call's cost unknown, so the flow's: no partial sum.
    reply = ChatResponse(text='{"t1": "Short.", "t2": "Done."}', finish_reason="stop", tokens_in=200, tokens_out=40)
    writer = Offer(id="w", provider="w", family="w", model="w", protocol="chat", transport="fake",
                   price_in=1.0, price_out=2.0)
    router = FakeRouter(decide=TRIAGED, chat=lambda request: RouteResult(
        ok=True, response=reply, chosen=writer, cost_usd=DRAFT_COST, failed_cost_known=False))
    result = await run(router)
    assert result.ok and result.output == {"t1": "Short.", "t2": "Done."}
    draft = by_label(result)["draft"]
    assert draft["cost_reported"] is None and draft["failed_cost_known"] is False  # not priced from its tokens
    assert result.cost_usd is None
