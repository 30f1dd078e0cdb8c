"""Bounded answers and strict fields (docs/reliability.md): each test reproduces one finding of issue 9."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

from compactor import http_api
from compactor.budget import Deadline
from compactor.compaction.preset import load_preset
from compactor.compaction.reassembly import MAX_MANIFEST_ENTRIES
from compactor.compaction.seal import NO_REDUCTION, SUMMARY_TRUNCATED, seal
from compactor.providers.base import ChatResponse, Offer
from compactor.router import Router
from fakes.transcripts import agent_transcript

from .conftest import RESPONSE_OVERHEAD_BYTES, assert_well_answered, post

DECISION_POLICY = load_preset()["flow"][1]["classify"]["policy"]
LONG = "The agent read config.py and found the retry limit hard-coded to 3 in load_settings(). " * 10


def long_transcript(turns: int = 6) -> list[dict[str, Any]]:
    return agent_transcript(LONG, turns)


# -- strict types and ranges (finding 7) ------------------------------------------------------------

@pytest.mark.usefixtures("bundled_catalog")
@pytest.mark.parametrize(("field_name", "value"), [
    ("keep_recent", "6"), ("keep_recent", True), ("keep_recent", 6.0), ("max_tokens", 10**18),
    ("max_tokens", "512"), ("max_tokens", True), ("target_ratio", "0.1"), ("target_ratio", True),
    ("pinned_indices", [True]), ("pinned_indices", ["1"]),
])
def test_fields_are_strictly_typed_and_ranged(compact_module: ModuleType, field_name: str, value: Any) -> None:
    raw = json.dumps({"messages": long_transcript(), field_name: value}).encode()
    status, text = post(compact_module, "compact", raw)
    body = assert_well_answered(status, text, raw)
    assert status == 422 and body["detail"][0]["loc"][:2] == ["body", field_name]


@dataclass
class RecordingChat:
    """A chat transport answering ``text`` with ``finish_reason``; records the requests."""

    text: str
    finish_reason: str | None = "stop"
    requests: list[Any] = field(default_factory=list)

    async def chat(self, offer: Offer, request: Any, timeout_s: float) -> ChatResponse:
        self.requests.append(request)
        return ChatResponse(text=self.text, finish_reason=self.finish_reason, tokens_in=10, tokens_out=5)

    async def decide(self, offer: Offer, request: Any, timeout_s: float) -> Any:  # pragma: no cover
        raise AssertionError("no decisions in legacy mode")


def chat_router(transport: RecordingChat) -> Router:
    offer = Offer(id="t/chat", provider="t", family="f", model="m", protocol="chat", transport="fake",
                  price_in=0, price_out=0)
    return Router([offer], transport_for=lambda _: transport)


async def test_legacy_refuses_a_negative_max_tokens_without_calling_the_provider(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor import service
    from compactor.models import CompactRequest

    transport = RecordingChat("short")
    status, body = await service.compact(CompactRequest(messages=long_transcript(), keep_recent=2, max_tokens=-1),
                                         deadline=Deadline.after_ms(5_000), router=chat_router(transport))
    assert status == 400 and "max_tokens" in body["error"]["message"]
    assert transport.requests == []


@pytest.mark.usefixtures("bundled_catalog")
@pytest.mark.parametrize("mode", ["decision", "seal"])
def test_a_negative_max_tokens_is_named_as_the_caller_sent_it(compact_module: ModuleType, mode: str) -> None:
    # Decision mode refused it as 400 invalid_flow: "flow_ir rejected at admission: node "batch_0_generate":
    # max_tokens must be an integer 1-4096", naming a flow and a node the caller never sent.
    raw = json.dumps({"messages": long_transcript(), "mode": mode, "max_tokens": -5}).encode()
    status, text = post(compact_module, "compact", raw)
    body = assert_well_answered(status, text, raw)
    assert status == 400 and body["error"] == {"message": "max_tokens must not be negative",
                                               "type": "invalid_request_error", "code": "invalid_max_tokens"}


# -- legacy never grows, never seals a cut-off summary (finding 4) --------------------------------

async def test_a_seal_that_would_grow_the_transcript_returns_the_original() -> None:
    messages = [{"role": "system", "content": "a"}, {"role": "user", "content": "b"},
                {"role": "assistant", "content": "c"}]  # (system messages are never sealed)
    body = await seal(messages, keep_recent=1, policy_ir=None, max_tokens=None,
                      router=chat_router(RecordingChat("a summary longer than what it replaces")),
                      deadline=Deadline.after_ms(5_000))
    assert body["messages"] == messages and body["compacted"] is False and body["reason"] == NO_REDUCTION


async def test_a_large_summary_never_makes_the_answer_larger_than_the_request() -> None:
    messages = long_transcript()
    body = await seal(messages, keep_recent=2, policy_ir=None, max_tokens=None,
                      router=chat_router(RecordingChat("x" * 100_000)), deadline=Deadline.after_ms(5_000))
    assert body["messages"] == messages and body["compacted"] is False and body["reason"] == NO_REDUCTION


async def test_a_summary_cut_off_at_max_tokens_is_not_sealed() -> None:
    messages = long_transcript()
    body = await seal(messages, keep_recent=2, policy_ir=None, max_tokens=None,
                      router=chat_router(RecordingChat("The agent fixed the bug. Here's", finish_reason="length")),
                      deadline=Deadline.after_ms(5_000))
    assert body["messages"] == messages and body["compacted"] is False and body["reason"] == SUMMARY_TRUNCATED


@pytest.mark.usefixtures("bundled_catalog")
def test_short_transcripts_come_back_unchanged_through_the_api(compact_module: ModuleType) -> None:
    messages = [{"role": "system", "content": "a"}, {"role": "user", "content": "b"},
                {"role": "assistant", "content": "c"}]  # (system messages are never sealed)
    raw = json.dumps({"messages": messages, "keep_recent": 1}).encode()
    status, text = post(compact_module, "compact", raw)
    body = assert_well_answered(status, text, raw)
    assert status == 200 and body["messages"] == messages and body["compacted"] is False


# -- bounded answers (finding 3) -------------------------------------------------------------------

def test_a_422_lists_a_bounded_number_of_short_errors() -> None:
    errors = [{"type": "dict_type", "loc": ("body", "messages", i), "msg": "x" * 10_000} for i in range(5_000)]
    body = http_api.validation_detail(errors)
    assert len(body["detail"]) == http_api.MAX_DETAIL_ITEMS
    assert body["detail_omitted"] == 5_000 - http_api.MAX_DETAIL_ITEMS
    assert len(json.dumps(body)) < 10_000


@pytest.mark.parametrize("prefix", ["Value error, ", "Assertion failed, ", ""])
def test_a_422_msg_is_the_validators_words(prefix: str) -> None:
    # pydantic writes "Value error, " before what a validator raises and "Assertion failed, " before an assert's
    # message; the 422 carried them before the words the docs quote.
    body = http_api.validation_detail([{"type": "value_error", "loc": ("body", "mode"), "msg": prefix + "the words"}])
    assert body["detail"][0]["msg"] == "the words"


@pytest.mark.usefixtures("bundled_catalog")
def test_many_bad_elements_answer_a_small_422(compact_module: ModuleType) -> None:
    raw = json.dumps({"messages": [1] * 200_000, "pinned_indices": ["a"] * 100_000}).encode()
    status, text = post(compact_module, "compact", raw)
    assert status == 422 and len(text) < 4_000


@pytest.mark.usefixtures("bundled_catalog")
def test_the_decision_manifest_is_capped(compact_module: ModuleType) -> None:
    messages = [{"role": ("user", "assistant")[i % 2], "content": "ok"} for i in range(6_000)]
    raw = json.dumps({"messages": messages, "decision_policy_ir": DECISION_POLICY}).encode()
    status, text = post(compact_module, "compact", raw)
    body = assert_well_answered(status, text, raw)
    assert status == 200 and len(text) <= len(raw) + RESPONSE_OVERHEAD_BYTES
    report = body["compaction"]
    assert len(report["fragments"]) == MAX_MANIFEST_ENTRIES
    assert report["fragments_omitted"] == 6_000 - MAX_MANIFEST_ENTRIES


def test_no_answer_over_the_lambda_limit_leaves_the_function() -> None:
    big = http_api.proxy_response(200, {"messages": ["x" * http_api.MAX_RESPONSE_BYTES]})
    bounded = http_api.bounded_response(big)
    assert bounded["statusCode"] == 413 and json.loads(bounded["body"])["error"]["code"] == "response_too_large"
    small = http_api.proxy_response(200, {"messages": []})
    assert http_api.bounded_response(small) is small


# -- caller-caused flow data errors are 4xx (finding 10) -------------------------------------------

@pytest.mark.usefixtures("bundled_catalog")
def test_a_flow_whose_data_does_not_fit_answers_422(compact_module: ModuleType) -> None:
    flow = ["flow", {"input": {"kind": "input"},
                     "pick": {"kind": "data", "operation": "project", "inputs": ["input"], "path": ["tickets"]},
                     "output": {"kind": "output", "inputs": ["pick"]}}]
    raw = json.dumps({"flow_ir": flow, "flow_input": {"not_tickets": 1}}).encode()
    status, text = post(compact_module, "flows", raw)
    body = assert_well_answered(status, text, raw)
    assert status == 422 and body["error"]["code"] == "data_error"


# -- the streamed reading of large transcript files keeps the same limits (finding 2) --------------

@pytest.mark.parametrize(("raw", "message"), [
    (b'[{"role": "user", "content": ' + b"[" * 300 + b"]" * 300 + b"}]", "nested deeper than 128 levels"),
    # the API's words (bounded_loads); the pure-Python backend's int() refused it as "not JSON: ..."
    (b'[{"role": "user", "content": ' + b"9" * 5000 + b"}]", "^number literal longer than 100 characters$"),
    (b'{"role": "user", "content": "a"}\n{"role": "user", "content": ' + b"[" * 3000 + b"]" * 3000 + b"}\n",
     "line 2 is not JSON: JSON nested deeper than 128 levels"),
])
def test_streamed_transcripts_refuse_what_the_api_refuses(raw: bytes, message: str) -> None:
    import io

    from compactor.transcript_stream import messages_from
    from compactor.transcripts import TranscriptError

    with pytest.raises(TranscriptError, match=message):
        list(messages_from(lambda: io.BytesIO(raw)))
