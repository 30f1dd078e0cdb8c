"""What decision mode sends to providers (docs/performance.md "Model input"): every decision request of
one compaction starts with the same bytes, the shared state first (model, guidance, the pinned view, the
recent evidence), so a provider's prompt cache can reuse it across the batches; through the real
``decisions`` and ``chat-decisions`` transports to a fake provider on 127.0.0.1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from compactor import service
from compactor.budget import Deadline
from compactor.models import CompactRequest
from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY
from compactor.transcripts import parse_transcript
from fakes.routers import provider_router
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply, decision_reply

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
TRANSCRIPT = CORPUS / "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"
SHARED = ("guidance", "instructions", "recent_evidence")


@pytest.mark.parametrize("decider_transport", ["decisions", "chat-decisions"])
async def test_the_batches_of_a_request_share_one_prefix_holding_the_shared_state(
        fake_provider: FakeProviderServer, decider_transport: str) -> None:
    messages, fields = parse_transcript(TRANSCRIPT.read_text(encoding="utf-8"))
    request = CompactRequest.model_validate({**fields, "messages": messages, "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
    status, body = await service.compact(request, deadline=Deadline.after_ms(60_000),
                                         router=provider_router(fake_provider, decider_transport))
    assert status == 200
    if decider_transport == "decisions":
        sent = [r.body for r in fake_provider.requests if r.path.endswith("/decisions")]
        states = [r.json["state"] for r in fake_provider.requests if r.path.endswith("/decisions")]
    else:  # the decision prompt: a system message, then the payload as the user message
        chats = [r for r in fake_provider.requests if r.path.endswith("/chat/completions") and r.json["model"] == "dec"]
        sent = [r.body for r in chats]
        prompts = [r.json["messages"][1]["content"] for r in chats]
        states = [json.loads(prompt)["state"] for prompt in prompts]
    assert len(sent) >= 4
    for state in states:  # the shared state comes first, then what is the batch's own
        assert list(state)[:3] == list(SHARED) and set(state) - set(SHARED) <= {"fragments", "later"}
        assert [state[key] for key in SHARED] == [states[0][key] for key in SHARED]
    prefix = os.path.commonprefix(sent)
    if decider_transport == "decisions":
        shared = json.dumps({key: states[0][key] for key in SHARED}, separators=(",", ":"), ensure_ascii=False)[1:-1]
    else:  # the prompt shows the evidence's JSON as JSON (docs/providers.md), its text travels as a JSON string
        evidence = [*states[0]["recent_evidence"], *(f["evidence"] for state in states for f in state["fragments"])]
        assert all(isinstance(e, list) or "[excerpt" in e for e in evidence)  # an excerpt is no JSON: quoted
        assert sum(isinstance(e, list) for e in evidence) > 0.8 * len(evidence)
        heads = {prompt[:prompt.index(',"fragments":')] for prompt in prompts}
        assert len(heads) == 1
        shared = json.dumps(heads.pop(), ensure_ascii=False)[1:-1]
    assert shared.encode() in prefix
    assert len(prefix) >= 0.3 * min(map(len, sent))


async def test_the_summary_prompt_embeds_each_item_as_json_not_as_a_quoted_string(
        fake_provider: FakeProviderServer) -> None:
    """An item is the JSON of a unit's messages; the summary prompt shows it as that JSON, not as a JSON string
    inside the prompt's JSON object (escaped once more in what the model reads, and once more on the wire: a
    fifth to a quarter of the bytes of a Claude Code or Codex session's summary requests, docs/performance.md)."""
    def answer(request: RecordedRequest) -> Reply:  # every fragment to summarize; summaries: none ("{}")
        if request.path.endswith("/decisions"):
            return decision_reply({name: {"type": "choice", "choice": "summarize", "confidence": 1.0}
                                   for name in request.json["questions"]})
        return chat_reply("{}")

    fake_provider.responder = answer
    messages, fields = parse_transcript(TRANSCRIPT.read_text(encoding="utf-8"))
    request = CompactRequest.model_validate({**fields, "messages": messages, "decision_policy_ir": DEFAULT_DECISIONS_POLICY})
    status, _ = await service.compact(request, deadline=Deadline.after_ms(60_000),
                                      router=provider_router(fake_provider, "decisions"))
    assert status == 200
    asked = {name for r in fake_provider.requests if r.path.endswith("/decisions") for name in r.json["questions"]}
    prompts = [r.json["messages"][1]["content"] for r in fake_provider.requests
               if r.path.endswith("/chat/completions")]
    items = {key: item for prompt in prompts for key, item in json.loads(prompt).items()}
    assert len(asked) > 10 and set(items) == asked
    for item in items.values():
        assert isinstance(item, list) and all(isinstance(message, dict) and "role" in message for message in item)
