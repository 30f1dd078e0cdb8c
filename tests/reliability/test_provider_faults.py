"""Provider faults in both modes (docs/reliability.md): whatever a provider does, ``/v1/compact`` answers 200
within the request's budget with the original messages (or a smaller, valid compaction). The real HTTP
transports talk to a fake provider on 127.0.0.1; budgets are a few seconds so the matrix stays quick."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from compactor import service
from compactor.budget import Deadline
from compactor.jsonutil import dense_dumps, dense_size
from compactor.models import CompactRequest
from compactor.providers.registry import transport_for
from compactor.router import Router
from fakes.provider_server import FakeProviderServer, RecordedRequest, Reply, chat_reply, decision_reply, default_answers

from .test_costs import CHEAP_FIRST, offers
from .test_isolation_and_retries import Sleeps, transcript

BUDGET_MS = 3_000
NO_HANG_S = 30  # far above the budget: only a hang can reach it


def decision_default(request: RecordedRequest) -> Reply:
    return decision_reply(default_answers(request.json.get("questions")), model=request.json["model"])


def invented_ids(request: RecordedRequest) -> Reply:
    answers = default_answers(request.json.get("questions"))
    answers["fragment_999999"] = {"type": "choice", "choice": "summarize", "confidence": 1.0}
    return decision_reply(answers, model=request.json["model"])


def invented_labels(request: RecordedRequest) -> Reply:
    answers = {name: {**answer, "choice": "obliterate"} if answer.get("type") == "choice" else answer
               for name, answer in default_answers(request.json.get("questions")).items()}
    return decision_reply(answers, model=request.json["model"])


def lone_surrogates(field: str) -> Callable[[RecordedRequest], Reply]:
    """Text UTF-8 cannot carry in one field of every answer (json.dumps escapes it as ``\\ud800``)."""
    bad = "x\ud800y"

    def reply(request: RecordedRequest) -> Reply:
        if field == "error":
            return Reply(500, {"error": {"message": "boom " + bad}})
        if request.path.endswith("/decisions"):
            answers = {name: {**answer, "reason": bad} if field == "text" else answer
                       for name, answer in default_answers(request.json.get("questions")).items()}
            return decision_reply(answers, model=bad if field == "model" else request.json["model"])
        return chat_reply("Summary " + bad if field == "text" else "Short.", model=bad if field == "model" else "m")
    return reply


def surrogate_bytes(request: RecordedRequest) -> Reply:
    """A body holding ED A0 80 (a surrogate encoded as if it were a character): not UTF-8."""
    if request.path.endswith("/decisions"):
        answers = {name: {**answer, "reason": "XX"} for name, answer in
                   default_answers(request.json.get("questions")).items()}
        body = decision_reply(answers, model=request.json["model"])
    else:
        body = chat_reply("Short XX.")
    return Reply(200, body.encoded_body().replace(b"XX", b"\xed\xa0\x80"))


HUGE = b'{"choices": [{"message": {"content": "' + b"x" * (9 * 1024 * 1024) + b'"}}]}'
FAULTS: dict[str, Callable[[RecordedRequest], Reply]] = {
    "hang": lambda r: Reply(200, {}, delay_s=60),
    "trickle": lambda r: Reply(200, b"{" + b" " * 4000 + b"}", trickle_s=60),
    "429_retry_after": lambda r: Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"}),
    "500": lambda r: Reply(500, {"error": {"message": "internal"}}),
    "502": lambda r: Reply(502, "<html>bad gateway</html>"),
    "reset": lambda r: Reply(reset=True),
    "malformed": lambda r: Reply(200, b'{"choices": [{"message": {"content": "unterminated'),
    "wrong_shape": lambda r: Reply(200, {"result": ["not", "what", "was", "asked"]}),
    "huge_body": lambda r: Reply(200, HUGE),
    "absurd_usage": lambda r: (chat_reply("Short.", prompt_tokens=10**30, completion_tokens=10**30)
                               if r.path.endswith("/chat/completions") else
                               decision_reply(default_answers(r.json.get("questions")), model=r.json["model"],
                                              input_tokens=10**30)),
    "oversized_summary": lambda r: (chat_reply("y" * 500_000) if r.path.endswith("/chat/completions")
                                    else decision_default(r)),
    "summary_cut_off": lambda r: (chat_reply("The agent fixed", finish_reason="length")
                                  if r.path.endswith("/chat/completions") else decision_default(r)),
    "invented_ids": lambda r: invented_ids(r) if r.path.endswith("/decisions") else chat_reply("{}"),
    "invented_labels": lambda r: invented_labels(r) if r.path.endswith("/decisions") else chat_reply("{}"),
    "lone_surrogate_text": lone_surrogates("text"),
    "lone_surrogate_model": lone_surrogates("model"),
    "lone_surrogate_error": lone_surrogates("error"),
    "surrogate_bytes": surrogate_bytes,
}


@pytest.mark.parametrize("mode", ["legacy", "decision"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_every_provider_fault_ends_in_200_with_the_originals(fake_provider: FakeProviderServer, fault: str,
                                                                   mode: str) -> None:
    fake_provider.responder = FAULTS[fault]
    router = Router(offers(fake_provider), transport_for=transport_for, sleep=Sleeps())
    fields: dict[str, Any] = {"decision_policy_ir": CHEAP_FIRST} if mode == "decision" else {}
    request = CompactRequest(messages=transcript(), keep_recent=2, policy_ir=CHEAP_FIRST, **fields)
    status, body = await asyncio.wait_for(
        service.compact(request, deadline=Deadline.after_ms(BUDGET_MS), router=router), NO_HANG_S)
    assert status == 200
    dense_dumps(body).encode("utf-8")  # an answer UTF-8 can write (docs/reliability.md "Bounded answers")
    out = body["messages"]
    assert dense_size(out) <= dense_size(request.messages)
    if not body["compacted"]:
        assert out == request.messages
    else:  # only a valid, shrinking compaction may replace the originals
        assert fault in ("absurd_usage", "invented_ids", "invented_labels") and dense_size(out) < dense_size(
            request.messages)
    if fault == "absurd_usage":
        assert body.get("x_router", {}).get("cost_usd") is None


@pytest.mark.parametrize("mode", ["legacy", "decision"])
async def test_a_huge_model_name_does_not_make_a_huge_answer(fake_provider: FakeProviderServer, mode: str) -> None:
    # docs/reliability.md "Bounded answers": a provider's model name reaches traces and answers cut to 256
    # characters (chat bodies may hold 8 MiB, decision bodies 128 KiB).
    def reply(request: RecordedRequest) -> Reply:
        if request.path.endswith("/decisions"):
            answers = {name: {**answer, "choice": "summarize"}
                       for name, answer in default_answers(request.json.get("questions")).items()}
            return decision_reply(answers, model="d" * 100_000)
        if request.json.get("response_format"):
            items = json.loads(request.json["messages"][-1]["content"])
            return chat_reply(json.dumps({key: "Short." for key in items}), model="m" * 5_000_000)
        return chat_reply("A short sealed summary.", model="m" * 5_000_000)

    fake_provider.responder = reply
    json_mode = [dataclasses.replace(offer, observations={**offer.observations, "supports_json_mode": True})
                 for offer in offers(fake_provider)]  # the summary calls of decision mode need it
    router = Router(json_mode, transport_for=transport_for, sleep=Sleeps())
    fields: dict[str, Any] = {"decision_policy_ir": CHEAP_FIRST} if mode == "decision" else {}
    request = CompactRequest(messages=transcript(), keep_recent=2, policy_ir=CHEAP_FIRST, **fields)
    status, body = await service.compact(request, deadline=Deadline.after_ms(20_000), router=router)
    assert status == 200 and body["compacted"] is True
    assert dense_size(body) <= dense_size(request.messages) + 128 * 1024
    assert "m" * 256 not in dense_dumps(body) and "d" * 256 not in dense_dumps(body)
