"""Decision batches are sized for the smallest decider context, so every batch is sent, none skipped."""

from __future__ import annotations

from pathlib import Path

from compactor.budget import Deadline
from compactor.compaction.decision import decision_payload_limit
from compactor.compaction.preparation import DECISION_PAYLOAD_MAX_BYTES, prepare
from compactor.compaction.preset import load_preset, question_template
from compactor.models import CompactRequest
from compactor.providers.base import Offer
from compactor.providers.registry import transport_for
from compactor.router import CONTEXT_REJECTION, Router
from compactor.service import compact
from compactor.transcripts import parse_transcript
from fakes.provider_server import FakeProviderServer

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
TRANSCRIPT = CORPUS / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"
CONTEXT = 6000


def decider(base_url: str, context: int | None) -> Offer:
    return Offer(id=f"d{context}", provider="p", family="f", model="m", protocol="decisions",
                 transport="chat-decisions", base_url=base_url, price_in=0.0, price_out=0.0,
                 observations={"supports_json_mode": True, **({"context": context} if context else {})})


def test_limit_follows_the_smallest_decider_context() -> None:
    url = "http://127.0.0.1:1/v1"
    unknown = Router([decider(url, None)], transport_for=transport_for)
    assert decision_payload_limit(unknown) == DECISION_PAYLOAD_MAX_BYTES
    assert decision_payload_limit(Router([decider(url, 1_000_000)], transport_for=transport_for)) \
        == DECISION_PAYLOAD_MAX_BYTES
    small = Router([decider(url, 1_000_000), decider(url, CONTEXT)], transport_for=transport_for)
    assert decision_payload_limit(small) == (CONTEXT - 600) * 3


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
    request = CompactRequest(messages=messages, decision_policy_ir=policy, pinned_indices=[1])
    status, body = await compact(request, deadline=Deadline.after_ms(60_000), router=router)
    assert status == 200
    decisions = [n for n in body["x_router"]["decision_trace"]["flow_nodes"] if n["kind"] == "decision"]
    assert len(decisions) == len(small.batches)
    rejected = [r for n in decisions for r in n["decision_trace"]["rejected"]]
    assert not [r for r in rejected if r["reason"] == CONTEXT_REJECTION]  # every batch fitted the decider
    assert len([r for r in fake_provider.requests if r.path.endswith("/chat/completions")]) >= len(small.batches)
