"""Batches are sized for the smallest context among the offers the policy may pick (deciders for the
decision payload, summarizers for the summary record), so every call is sent, none skipped."""

from __future__ import annotations

from pathlib import Path

from compactor.budget import Deadline
from compactor.compaction.decision import (
    SUMMARY_PROMPT_TOKENS, decision_payload_limit, summary_record_limit, summary_reply_limit)
from compactor.compaction.preparation import DECISION_PAYLOAD_MAX_BYTES, MAX_SUMMARY_RECORD_BYTES, BatchSizer, prepare
from compactor.compaction.preset import generation_tokens, load_preset, question_template
from compactor.models import CompactRequest
from compactor.providers.base import Offer
from compactor.providers.registry import transport_for
from compactor.router import CONTEXT_REJECTION, Router
from compactor.service import compact
from compactor.transcripts import parse_transcript
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply, decision_reply

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
TRANSCRIPT = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
CONTEXT = 6000


SUMMARIZER_CONTEXT = 4096


def decider(base_url: str, context: int | None, provider: str = "p", transport: str = "chat-decisions") -> Offer:
    return Offer(id=f"{provider}/d{context}", provider=provider, family="f", model="m", protocol="decisions",
                 transport=transport, base_url=base_url, price_in=0.0, price_out=0.0,
                 observations={"supports_json_mode": True, **({"context": context} if context else {})})


def summarizer(base_url: str, context: int | None, provider: str = "p") -> Offer:
    return Offer(id=f"{provider}/c{context}", provider=provider, family="c", model="c", protocol="chat",
                 transport="openai", base_url=base_url, price_in=0.0, price_out=0.0,
                 observations={"supports_json_mode": True, **({"context": context} if context else {})})


def only(provider: str) -> list:
    return ["policy", ["provider_eq", provider], ["neg", ["field", "price_in"]], ["top_k", 4, ["argmax"]], ["id"],
            ["always", {"action": "next_candidate"}]]


def summary_room(context: int, max_tokens: int = 512) -> int:
    return (context - max_tokens - SUMMARY_PROMPT_TOKENS) * 3 * 4 // 5


def test_limit_follows_the_smallest_decider_context() -> None:
    url = "http://127.0.0.1:1/v1"
    unknown = Router([decider(url, None)], transport_for=transport_for)
    assert decision_payload_limit(unknown) == DECISION_PAYLOAD_MAX_BYTES
    assert decision_payload_limit(Router([decider(url, 1_000_000)], transport_for=transport_for)) \
        == DECISION_PAYLOAD_MAX_BYTES
    small = Router([decider(url, 1_000_000), decider(url, CONTEXT)], transport_for=transport_for)
    assert decision_payload_limit(small) == (CONTEXT - 600) * 3


def test_limits_follow_the_offers_the_policy_may_pick() -> None:
    url = "http://127.0.0.1:1/v1"
    router = Router([decider(url, 1_000_000, "big"), decider(url, CONTEXT, "small"),
                     summarizer(url, 1_000_000, "big"), summarizer(url, SUMMARIZER_CONTEXT, "small")],
                    transport_for=transport_for)
    assert decision_payload_limit(router) == (CONTEXT - 600) * 3  # the default policy may pick either
    assert decision_payload_limit(router, only("big")) == DECISION_PAYLOAD_MAX_BYTES
    assert decision_payload_limit(router, only("small")) == (CONTEXT - 600) * 3
    assert decision_payload_limit(router, ["not", "a policy"]) == (CONTEXT - 600) * 3  # admission says why later
    # without max_tokens the summary calls may take a quarter of the smallest context
    assert summary_record_limit(router) == summary_room(SUMMARIZER_CONTEXT, SUMMARIZER_CONTEXT // 4)
    assert summary_record_limit(router, only("big")) == MAX_SUMMARY_RECORD_BYTES
    assert summary_record_limit(router, only("small"), max_tokens=1024) == summary_room(SUMMARIZER_CONTEXT, 1024)
    assert summary_reply_limit(router) == SUMMARIZER_CONTEXT // 4 and summary_reply_limit(router, only("big")) == 4096
    assert summary_reply_limit(router, max_tokens=300) == 300
    assert generation_tokens(None, 100_000, SUMMARIZER_CONTEXT // 4) == SUMMARIZER_CONTEXT // 4  # a batch's room stops there


def summarize_everything(request: RecordedRequest) -> Reply:
    if request.path.endswith("/decisions"):
        answers = {name: {"type": "choice", "choice": "summarize", "confidence": 0.9}
                   for name in request.json["questions"]}
        return decision_reply(answers, model=request.json["model"])
    return chat_reply("{}")


async def test_small_summarizer_context_summary_calls_all_fit(fake_provider: FakeProviderServer) -> None:
    messages, _ = parse_transcript(TRANSCRIPT.read_text())
    fake_provider.responder = summarize_everything
    router = Router([decider(fake_provider.base_url, None, transport="decisions"),
                     summarizer(fake_provider.base_url, SUMMARIZER_CONTEXT)], transport_for=transport_for)
    limit = summary_record_limit(router)
    default = prepare(messages, keep_recent=6, target_ratio=0.1, pinned_indices=[1],
                      question_template=question_template())
    small = prepare(messages, keep_recent=6, target_ratio=0.1, pinned_indices=[1],
                    question_template=question_template(), summary_max_bytes=limit)
    sizer = BatchSizer(default.instructions, default.recent_evidence)
    assert any(sizer.summary_record(batch) > limit for batch in default.batches)  # the default would overflow
    assert all(sizer.summary_record(batch) <= limit for batch in small.batches)
    policy = load_preset()["flow"][1]["classify"]["policy"]
    request = CompactRequest(messages=messages, decision_policy_ir=policy, pinned_indices=[1], keep_recent=6)
    status, body = await compact(request, deadline=Deadline.after_ms(60_000), router=router)
    assert status == 200
    generations = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "llm"]
    assert len(generations) == len(small.batches)
    assert all(not n.get("error") for n in generations)
    rejected = [r for n in generations for r in n["decision_trace"]["rejected"]]
    assert not [r for r in rejected if r["reason"] == CONTEXT_REJECTION]  # every summary call fitted


async def test_small_context_batches_are_all_sent(fake_provider: FakeProviderServer) -> None:
    messages, _ = parse_transcript(TRANSCRIPT.read_text())
    router = Router([decider(fake_provider.base_url, CONTEXT)], transport_for=transport_for)
    limit = decision_payload_limit(router)
    default = prepare(messages, keep_recent=6, target_ratio=0.1, pinned_indices=[1],
                      question_template=question_template())
    small = prepare(messages, keep_recent=6, target_ratio=0.1, pinned_indices=[1],
                    question_template=question_template(), payload_max_bytes=limit)
    assert len(small.batches) > len(default.batches)
    policy = load_preset()["flow"][1]["classify"]["policy"]
    request = CompactRequest(messages=messages, decision_policy_ir=policy, pinned_indices=[1], keep_recent=6)
    status, body = await compact(request, deadline=Deadline.after_ms(60_000), router=router)
    assert status == 200
    decisions = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"]
    assert len(decisions) == len(small.batches)
    rejected = [r for n in decisions for r in n["decision_trace"]["rejected"]]
    assert not [r for r in rejected if r["reason"] == CONTEXT_REJECTION]  # every batch fitted the decider
    assert len([r for r in fake_provider.requests if r.path.endswith("/chat/completions")]) >= len(small.batches)
