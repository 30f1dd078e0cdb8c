"""ChatDecisionsTransport: a chat model answers decisions through Compactor's prompt."""

from __future__ import annotations

import dataclasses
import json

import pytest

from compactor.markers import EVIDENCE_MARKER
from compactor.providers.base import ChatRequest, DecisionRequest, Offer, ProviderError
from compactor.providers.chat_decisions import ChatDecisionsTransport, decision_messages
from compactor.providers.native_decisions import DecisionsTransport
from compactor.router import compute_cost
from fakes.provider_server import FakeProviderServer, Reply, chat_reply

TRANSPORT = ChatDecisionsTransport()
QUESTIONS = {
    "f1": {"type": "choice", "instructions": "Keep or summarize?", "criteria": {"keep": "needed", "summarize": "bulky"}},
    "useful": {"type": "noul", "instructions": "Is it useful?"},
}
REQUEST = DecisionRequest(state={"f1": "ls -la output ✓"}, questions=QUESTIONS)
GOOD = {"answers": {"f1": {"type": "choice", "choice": "summarize", "confidence": 0.7},
                    "useful": {"type": "noul", "noul": 0.2}}}


async def failure(offer: Offer, timeout_s: float = 10) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.decide(offer, REQUEST, timeout_s)
    return caught.value


async def test_success_prompt_and_usage(fake_provider: FakeProviderServer, chat_decision_offer: Offer,
                                        api_key: str) -> None:
    fake_provider.enqueue(chat_reply(json.dumps(GOOD), prompt_tokens=100, completion_tokens=20, cost=0.003))
    response = await TRANSPORT.decide(chat_decision_offer, REQUEST, 10)
    assert response.model == "fake-chat-1"
    assert response.answers == GOOD["answers"]
    assert (response.tokens_in, response.tokens_out, response.tokens_total) == (100, 20, 120)
    assert response.cost_reported == pytest.approx(0.003)
    sent = fake_provider.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {api_key}"
    body = sent.json
    assert body["model"] == "fake-chat-1"
    assert body["response_format"] == {"type": "json_object"}
    assert isinstance(body["max_tokens"], int) and body["max_tokens"] > 0
    system, user = body["messages"]
    assert system["role"] == "system" and '"answers"' in system["content"]
    assert user["role"] == "user"
    assert json.loads(user["content"]) == {"state": REQUEST.state, "questions": QUESTIONS}


async def test_a_decision_keeps_the_cached_tokens_and_the_request_body_is_unchanged_by_a_cache_prefix(
        fake_provider: FakeProviderServer, chat_decision_offer: Offer) -> None:
    """OpenAI caches on its own: nothing marks the prefix, and the cached tokens it reports are priced
    at the discount (compactor.cost)."""
    fake_provider.enqueue(chat_reply(json.dumps(GOOD), prompt_tokens=3000, completion_tokens=20, cached_tokens=2048))
    priced = dataclasses.replace(chat_decision_offer, price_in=1.0, price_out=2.0)
    hinted = DecisionRequest(state=REQUEST.state, questions=QUESTIONS, cache_prefix=("f1",))
    response = await TRANSPORT.decide(priced, hinted, 10)
    assert (response.tokens_in, response.tokens_cached) == (3000, 2048)
    assert compute_cost(priced, response, 12)[0] == pytest.approx((952 + 2048 * 0.1 + 20 * 2.0) / 1e6)
    user = fake_provider.requests[0].json["messages"][1]
    assert json.loads(user["content"]) == {"state": REQUEST.state, "questions": QUESTIONS}


@pytest.mark.parametrize(
    "reply",
    [
        chat_reply("not json"),
        chat_reply('{"answers": {}, "answers": {}}'),
        chat_reply(json.dumps(GOOD["answers"])),  # bare answers, not {"answers": ...}
        chat_reply(json.dumps(GOOD), finish_reason="length"),
        chat_reply(None, tool_calls=[{"id": "t", "type": "function", "function": {"name": "x", "arguments": "{}"}}]),
        chat_reply(""),
        # a reason escaping a lone surrogate inside the reply's JSON: no text (docs/reliability.md "Bounded answers")
        chat_reply(json.dumps({"answers": {name: {**answer, "reason": "x\ud800"}
                                           for name, answer in GOOD["answers"].items()}})),
    ],
)
async def test_bad_replies_are_bad_response(fake_provider: FakeProviderServer, chat_decision_offer: Offer,
                                            reply: Reply) -> None:
    fake_provider.enqueue(reply)
    assert (await failure(chat_decision_offer)).kind == "bad_response"


async def test_an_invented_label_is_an_invalid_decision(fake_provider: FakeProviderServer,
                                                     chat_decision_offer: Offer) -> None:
    fake_provider.enqueue(chat_reply(json.dumps({"answers": {**GOOD["answers"],
                                                             "f1": {"type": "choice", "choice": "drop"}}})))
    assert (await failure(chat_decision_offer)).kind == "invalid_decision"


async def test_rejected_reply_keeps_billed_cost(fake_provider: FakeProviderServer, chat_decision_offer: Offer) -> None:
    fake_provider.enqueue(chat_reply("garbage", cost=0.01))
    error = await failure(chat_decision_offer)
    assert (error.kind, error.cost_reported) == ("bad_response", 0.01)


async def test_http_errors_pass_through(fake_provider: FakeProviderServer, chat_decision_offer: Offer) -> None:
    fake_provider.enqueue(Reply(429, {"error": {"message": "slow down"}}))
    assert (await failure(chat_decision_offer)).kind == "rate_limit"


async def test_invalid_payload_is_refused_before_any_call(fake_provider: FakeProviderServer,
                                                          chat_decision_offer: Offer) -> None:
    with pytest.raises(ProviderError) as caught:
        await TRANSPORT.decide(chat_decision_offer, DecisionRequest("s", {}), 10)
    assert caught.value.kind == "bad_request"
    assert fake_provider.requests == []


async def test_chat_is_refused(chat_decision_offer: Offer) -> None:
    with pytest.raises(ProviderError):
        await TRANSPORT.chat(chat_decision_offer, ChatRequest([]), 1)


# A fragment's evidence: the JSON text of its messages (ASCII, default separators), whole or an excerpt.
WHOLE = json.dumps([{"role": "assistant", "content": 'ran "ls"\n'}, {"role": "tool", "content": "a.py ✓"}])
EXCERPT = WHOLE[:10] + EVIDENCE_MARKER + WHOLE[-20:]  # no JSON: shown quoted, as in the native payload
EVIDENCE_STATE = {"guidance": "Judge each fragment.", "recent_evidence": [WHOLE],
                  "fragments": [{"id": "f1", "bytes": 900, "evidence": WHOLE},
                                {"id": "f2", "bytes": 4000, "evidence": EXCERPT}]}
EVIDENCE_QUESTIONS = {fid: QUESTIONS["f1"] for fid in ("f1", "f2")}


async def test_the_prompt_shows_the_evidences_json_as_json_and_the_native_payload_keeps_the_string(
        fake_provider: FakeProviderServer, chat_decision_offer: Offer, decision_offer: Offer) -> None:
    """Quoted, the JSON of a fragment's messages reached the model with each ``"`` as ``\\"``, and the wire with
    ``\\\\\\"`` (docs/providers.md "Decisions through a chat model"); the native decisions payload is unchanged."""
    answers = {"answers": {fid: GOOD["answers"]["f1"] for fid in ("f1", "f2")}}
    fake_provider.enqueue(chat_reply(json.dumps(answers)))
    fake_provider.enqueue(Reply(200, {"model": "fake-decider-1", **answers}))
    request = DecisionRequest(state=EVIDENCE_STATE, questions=EVIDENCE_QUESTIONS)
    assert (await TRANSPORT.decide(chat_decision_offer, request, 10)).answers == answers["answers"]
    await DecisionsTransport().decide(decision_offer, request, 10)
    chat, native = fake_provider.requests
    user = chat.json["messages"][1]["content"]
    assert user == ('{"state":{"guidance":"Judge each fragment.","recent_evidence":[' + WHOLE + '],"fragments":['
                    '{"id":"f1","bytes":900,"evidence":' + WHOLE + '},{"id":"f2","bytes":4000,"evidence":'
                    + json.dumps(EXCERPT, ensure_ascii=False) + '}]},"questions":'
                    + json.dumps(EVIDENCE_QUESTIONS, separators=(",", ":"), ensure_ascii=False) + "}")
    assert json.loads(user)["state"]["fragments"][0]["evidence"] == json.loads(WHOLE)
    assert json.dumps(WHOLE)[1:-1].encode() in chat.body  # the whole evidence: escaped once on the wire
    assert native.json["state"] == EVIDENCE_STATE  # the native protocol's evidence stays a string


@pytest.mark.parametrize("text", [
    '{"a":1,"a":2}',  # a key twice: not strict JSON
    '[NaN]',
    "[" * 130 + "]" * 130,  # deeper than a request body may be, however deep the parser reads here
    '[1] x',
    '"[1]"',
])
def test_a_string_that_is_not_a_strict_json_container_within_a_bodys_depth_is_quoted(text: str) -> None:
    payload = {"state": {"evidence": text}, "questions": {}}
    assert decision_messages(payload)[1]["content"] == json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def test_a_container_as_deep_as_a_body_may_be_is_shown_as_json() -> None:
    text = "[" * 129 + "]" * 129  # its innermost array at level 128, the root at 0
    prompt = decision_messages({"state": [text], "questions": {}})[1]["content"]
    assert prompt == '{"state":[' + text + '],"questions":{}}'
