"""Property tests of legacy (seal) mode (docs/behaviour.md#seal) on generated transcripts, with a
scripted summarizer behind the real Router: no message is lost, the tail is intact and never starts
with a tool result that has its call in the aged part, and failures return the original."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import event, given, strategies as st

from compactor import service
from compactor.budget import Deadline
from compactor.jsonutil import dense_size
from compactor.models import CompactRequest
from compactor.providers.base import UPSTREAM_ERROR, ChatRequest, ChatResponse, Offer, ProviderError
from compactor.router import Router

from .fakes import WRITER
from .invariants import SEAL_MARKER
from .strategies import FAST, transcripts

REPLIES = ("summary", "unicode", "blank", "none", "raise", "timeout")


class Summarizer:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.requests: list[ChatRequest] = []

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        self.requests.append(request)
        if self.reply == "raise":
            raise ProviderError(UPSTREAM_ERROR, "scripted failure")
        if self.reply == "timeout":
            raise TimeoutError
        text = {"summary": "  Decisions: fixed x.  ", "unicode": "résumé 😀 \U00010348", "blank": " \n ",
                "none": None}[self.reply]
        return ChatResponse(text=text, finish_reason="stop", tokens_in=7, tokens_out=3, cost_reported=0.0)

    async def decide(self, offer: Offer, request: Any, timeout_s: float) -> Any:
        raise AssertionError("legacy mode makes no decision calls")


@FAST
@given(messages=transcripts(max_blocks=16), keep_recent=st.integers(-1, 8), reply=st.sampled_from(REPLIES))
def test_seal_never_loses_a_message(messages: list[dict[str, Any]], keep_recent: int, reply: str) -> None:
    summarizer = Summarizer(reply)
    router = Router([WRITER], transport_for=lambda offer: summarizer)
    request = CompactRequest(messages=messages, keep_recent=keep_recent)
    status, body = asyncio.run(service.compact(request, deadline=Deadline.after_ms(600_000), router=router))
    assert status == 200
    out = body["messages"]
    event("sealed call made" if summarizer.requests else "no-op")
    if not summarizer.requests:  # nothing to seal: the exact no-op body
        assert body == {"messages": messages, "compacted": False}
        return
    assert "x_router" in body
    if reply not in ("summary", "unicode"):  # empty summary or failed call: the original
        assert out == messages and body["compacted"] is False
        return
    keep = max(1, keep_recent)
    protected = ("system", "developer")  # always pinned: never sealed (docs/behaviour.md#seal)
    frozen = 0
    while frozen < len(messages) and messages[frozen].get("role") in protected:
        frozen += 1
    if not body["compacted"]:  # a seal that would not shrink the transcript returns the original
        event("seal would not shrink")
        assert out == messages and body["reason"] == "no_reduction"
        return
    assert dense_size(out) < dense_size(messages) and out[:frozen] == messages[:frozen]
    text = {"summary": "Decisions: fixed x.", "unicode": "résumé 😀 \U00010348"}[reply]
    assert out[frozen] == {"role": "system", "content": SEAL_MARKER + text}
    after = out[frozen + 1:]  # the always-pinned messages of the middle (held), then the tail

    def held_before(start: int) -> list[dict[str, Any]]:
        return [m for m in messages[frozen:start] if m.get("role") in protected]

    start = next(s for s in range(frozen + 1, len(messages) + 1) if after == held_before(s) + messages[s:])
    recent = messages[start:]
    # tail intact, aged non-empty
    assert len(recent) >= keep and any(m.get("role") not in protected for m in messages[frozen:start])
    if len(recent) > keep:
        event("tail widened to a whole tool unit")
    # The tail never opens with a result whose call was sealed (the call moves into the tail with its
    # results); only stray results, with no call before them, may open it.
    if recent[0].get("role") == "tool":
        event("tail opens with stray results")
        before = messages[start - 1]
        assert before.get("role") != "tool" and not before.get("tool_calls")
    (sent,) = summarizer.requests
    rendered = sent.messages[-1]["content"]
    aged = [m for m in messages[frozen:start] if m.get("role") not in protected]
    assert rendered.count("\n") >= len(aged) - 1
    for message in aged:  # everything between the frozen prefix and the tail was sent to be sealed
        content = message.get("content")
        if isinstance(content, str) and content:
            assert content in rendered
